-- Proof of transmission (issue 21, item 3): what the fax engine reported for each call attempt (the
-- outcome's `engine`: T.30 result, ECM, resolution, compression, line time...), so the transmission
-- report can show it per attempt. NULL for attempts recorded before this migration and for backends
-- that report nothing of the kind (the simulated line).
ALTER TABLE fax_attempts ADD COLUMN engine jsonb;
