-- Tracing (OpenTelemetry) across the recovery points: the W3C traceparent
-- of the request that made a key, so that the completer's or an operator's
-- attempt, a new trace, can link to the trace of the request it resumes;
-- and of the request that staged a job, so that the job and the webhook
-- deliveries it makes carry on that request's trace. NULL when the request
-- was not traced (tracing off, or not sampled). Nullable columns without a
-- default: adding them rewrites nothing.
ALTER TABLE idempotency_keys ADD COLUMN trace_parent text;
ALTER TABLE staged_jobs ADD COLUMN trace_parent text;
