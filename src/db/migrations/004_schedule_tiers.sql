-- Scheduled faxes in two tiers (README "Scheduled faxes"). A fax due further ahead than the near
-- window waits here, as its fax_jobs row (state 'scheduled', schedule_ref NULL), not in pg-boss; the
-- promoter walks this index from the earliest due time and moves faxes into the pg-boss due queue
-- shortly before they fall due (setting schedule_ref in the same transaction). The same index
-- answers the pending-count gauge and keeps both costs independent of the rest of fax_jobs.
CREATE INDEX fax_jobs_scheduled_due ON fax_jobs (scheduled_at) WHERE state = 'scheduled';
