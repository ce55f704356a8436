ALTER TABLE webhook_endpoints ALTER COLUMN created_at SET DEFAULT now();
ALTER TABLE staged_jobs ALTER COLUMN created_at SET DEFAULT now();
