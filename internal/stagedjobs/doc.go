// Package stagedjobs owns the jobs that announce committed state changes:
// receipts to customers and events to merchants. A flow stages them with
// StageTx in the same transaction as the change itself, so a job exists if
// and only if its change committed; the enqueuer later moves them, exactly
// once, into the job queue (River), and the workers here apply them. Events
// are the exception: the enqueuer writes them itself, with their webhook
// deliveries, in the transaction that deletes their staged rows, and queues
// nothing for them: a delivery row is due at once for the webhook
// dispatcher (Enqueuer.writeInline says why).
//
// # Receipts and the mail server
//
// The mail server is the one party here the service does not control, so
// the receipt worker is built so that nothing else waits on it:
//
//   - No transaction and no pool connection is held across the send
//     (ReceiptWorker.Work): the receipt's row is reserved in one short
//     statement, the send runs with nothing held, and the outcome is
//     written in another.
//   - The send's deadline comes from its context, for the whole
//     conversation (SMTPMailer, on wneessen/go-mail, whose own timeouts
//     are per command and ignore the context after the dial).
//   - Receipts run on their own River queue (ReceiptQueue), with fewer
//     workers than the pool has connections (internal/worker), and a job
//     timeout longer than the send's (ReceiptWorker.Timeout).
//
// And so that a receipt goes out once: a message the server accepted
// (answered 250 to) is recorded as sent on a context detached from the
// job's, even if the job's context ended meanwhile; a second run while the
// reservation holds snoozes instead of sending; a failed send gives the
// reservation back and River retries it with backoff. The one gap left is
// SMTP's own: a crash between the server's acceptance and the record (or a
// server that accepts a message only after the client gave up on it) sends
// the receipt again, under the same Message-ID, so the receiving side can
// tell.
//
// # Traces
//
// A job carries on the trace of the request that staged it: its
// traceparent goes with the staged row and into River's job metadata, and
// the job's span (TraceJobs) is a child in that trace (trace.go says how,
// and why a child rather than a link).
//
// This package must never send mail inside a database transaction, and
// never stage a job outside its change's transaction.
package stagedjobs
