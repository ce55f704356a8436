// Package payments owns payments: what a payment is, how it is read and
// listed, and (with the idempotency engine, package recovery) the flows
// that create, capture, cancel and refund it.
//
// Each flow is one file (create.go, capture.go, cancel.go, refund.go) that
// opens with its state machine, drawn, and declares it once as a
// recovery.Flow: one function per phase, from one recovery point to the
// next. The moves of a payment's life, and the event each stages, are one
// table (transition.go: applyMove); a refund's are another
// (refund_moves.go). A flow and a Stripe webhook may learn of the same
// change in either order: whichever applies it first, under the payment's
// row lock, makes the move and stages its event, so each change yields
// one event.
//
// What a phase hands to the next is typed (recovery.Handoff: the create
// flow's payment), and never needed: without it, the phase reads.
//
// It never writes HTTP responses: package api renders what it returns.
package payments
