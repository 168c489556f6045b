-- Commands parked by a send worker (an account's backlog past PREPARE_ACCOUNT_BACKLOG, or a shutdown
-- while they waited for their turn) are intake lots too, so that the dispatcher's sweep republishes
-- them. They are marked, so that the outbox gauge (unconfirmed publishes: a broker or intake
-- problem) does not count a flood of one account's parked commands, and the sweep can tell them apart.
ALTER TABLE intake_lots ADD COLUMN parked boolean NOT NULL DEFAULT false;
