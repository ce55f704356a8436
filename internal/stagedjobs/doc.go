// Package stagedjobs owns the jobs that announce committed state changes:
// receipts to customers and events to merchants. A flow stages them with
// StageTx in the same transaction as the change itself, so a job exists if
// and only if its change committed; the enqueuer later applies them, exactly
// once. Events and receipts are written by the enqueuer itself, in the
// transaction that deletes their staged rows (Enqueuer.writeInline says
// why): an event with its webhook deliveries, each due at once for the
// webhook dispatcher, and a receipt as its row in receipts, due at once for
// the receipt sender (ReceiptSender). Other kinds, and a batch the enqueuer
// cannot write, go into the job queue (River), where the workers here
// apply them.
//
// # Receipts and the mail server
//
// The mail server is the one party here the service does not control, so
// the receipt sender (and ReceiptWorker, River's, for the receipts that go
// there) is built so that nothing else waits on it:
//
//   - No transaction and no pool connection is held across the send: the
//     receipt's row is reserved (leased) in one short statement, a batch
//     at a time (ReceiptSender) or one (ReceiptWorker.Work), the send runs
//     with nothing held, and the outcome is written in another.
//   - The send's deadline comes from its context, for the whole
//     conversation (SMTPMailer, on wneessen/go-mail, whose own timeouts
//     are per command and ignore the context after the dial).
//   - Receipts have slots of their own (SenderConfig.Concurrency, and
//     River's ReceiptQueue for ReceiptWorker), and a lease longer than the
//     send's deadline.
//
// And so that a receipt goes out once: a message the server accepted
// (answered 250 to) is recorded as sent on a context detached from the
// sender's, even if it was shutting down meanwhile; nobody sends a receipt
// while another's reservation holds; a failed send gives the reservation
// back and is retried with backoff. The one gap left is SMTP's own: a crash
// between the server's acceptance and the record (or a server that accepts
// a message only after the client gave up on it) sends the receipt again,
// under the same Message-ID, so the receiving side can tell.
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
