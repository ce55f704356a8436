// Package payments owns payments: what a payment is, how it is read and
// listed, and (with the idempotency engine) the flows that create, capture,
// cancel and refund it.
//
// It never writes HTTP responses: package api renders what it returns.
package payments
