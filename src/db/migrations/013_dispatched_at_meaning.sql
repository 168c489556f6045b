-- Documentation only: what fax_jobs.dispatched_at means (docs/source-layout.md, "dispatched_at").
-- The name is older than its meaning and is kept (renaming a column under running processes is not
-- worth it); the comment is what \d+ fax_jobs shows.
COMMENT ON COLUMN fax_jobs.dispatched_at IS
  'Not the time a command was published. NULL: the job is accepted and its command may not have been '
  'published (no confirm recorded, no intake lot): the command publisher''s sweep republishes it after '
  'the grace period. A time: the sweep need not look at this job through this column, because the '
  'publish was confirmed (recorded up to 50 ms after the confirm), or the row was written with no '
  'command to publish yet (scheduled, awaiting approval), or an intake lot stands for its command '
  '(HTTP group commit: set at INSERT, before anything is published). Set back to NULL when a job '
  'becomes accepted later: a scheduled job falls due, an approved job is to be sent at once.';
