-- Commands of HTTP intake jobs whose publish has not been confirmed yet, one row per group-commit
-- batch and account (a "lot") instead of a mark on every job. The batch's transaction inserts the lot
-- together with its jobs (which are recorded as dispatched); the API deletes the lot once RabbitMQ
-- confirmed every command of it. A lot that is still here after the grace period belongs to a
-- process that died between COMMIT and confirm (or whose confirm failed): the dispatcher's sweep
-- republishes the commands of its jobs that are still accepted, then deletes it. Consumers fence on
-- the job's state, so a command published twice makes one fax.
--
-- Before this, each confirmed job was marked with an UPDATE of dispatched_at: a non-HOT update of the
-- wide fax_jobs row (every index got a new entry), about a quarter of PostgreSQL's work per send.
CREATE TABLE intake_lots (
  id          uuid PRIMARY KEY,
  account_id  uuid NOT NULL,
  job_ids     uuid[] NOT NULL CHECK (cardinality(job_ids) > 0),
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX intake_lots_created ON intake_lots (created_at);
-- Written by the API role inside an account's transaction; read and deleted by the owner.
SELECT faxline_enable_tenant_rls('intake_lots');
