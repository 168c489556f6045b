-- faxline schema, version 35: the line caller's idle round is one statement (docs/lines-retries.md
-- "Polling"). It asks when the next retry falls due, and this index answers that in one probe
-- however many jobs wait in the other line states; promoting due retries uses it too.
CREATE INDEX fax_jobs_retry_due ON fax_jobs (next_attempt_at) WHERE state = 'retry_waiting';
