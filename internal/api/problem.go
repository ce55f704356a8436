package api

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"

	"github.com/example/payments/internal/currency"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/safehttp"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/internal/webhooks"
)

func validationFailed(format string, args ...any) *problem.Problem {
	return problem.New(http.StatusBadRequest, problem.ValidationFailed, format, args...)
}

// problemFor is the one place where errors become HTTP statuses and codes:
// the sentinels of every package below api, the engine's included, and
// the problems the flows and handlers chose themselves. Anything it does
// not recognise is a 500 whose details stay in the log (and an idempotent
// request stays resumable: a retry with the same key picks it up).
//
// problemfor_internal_test.go walks every exported sentinel (var Err... =
// errors.New) of the packages api is built on through it, so a new
// sentinel without an answer here fails that test.
func problemFor(err error) *problem.Problem {
	var p *problem.Problem
	var q *queryParamError
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &q) && isNotFound(q.err):
		// A cursor naming no object of the caller's: the parameter is
		// wrong, not the route (a path's unknown id is 404).
		return validationFailed("%s: no such %s %q.", q.name, q.object, q.value)
	case errors.Is(err, recovery.ErrKeyReused):
		return problem.New(http.StatusUnprocessableEntity, problem.IdempotencyKeyReused,
			"This Idempotency-Key was first used for a different request (method, path or body). Use a new key for a new request.")
	case errors.Is(err, recovery.ErrKeyInUse), errors.Is(err, recovery.ErrLockLost), errors.Is(err, db.ErrLockNotHeld):
		// Told when to come back: when the lock lapses if its holder is
		// overdue (it likely died; recovery.KeyInUseError), else soon.
		retryAfter := 1
		var inUse *recovery.KeyInUseError
		if errors.As(err, &inUse) {
			retryAfter = max(1, int(math.Ceil(inUse.RetryAfter().Seconds())))
		}
		return problem.New(http.StatusConflict, problem.IdempotencyKeyInUse,
			"A request with this Idempotency-Key is in progress. Retry with the same key shortly.").WithRetryAfter(retryAfter)
	case errors.Is(err, recovery.ErrNotRetryable):
		return problem.New(http.StatusConflict, problem.IdempotencyKeyInUse,
			"This Idempotency-Key is finished or in use by a request in progress.").WithRetryAfter(1)
	case errors.Is(err, recovery.ErrFailed):
		// The service's own fault, not the client's (a constraint a flow's
		// write violates, a bug), and no retry can cure it: 500, once per
		// request, and the key waits for an operator (docs/API.md
		// section 2, rule 7). First, since its error wraps the phase's.
		return problem.New(http.StatusInternalServerError, problem.Internal,
			"This Idempotency-Key's request failed on our side, with an error that retrying cannot cure, and was not completed. "+
				"It waits for an operator, who re-drives it with `payments keys retry` once the cause is fixed; until then every retry with this key gets this answer, and nothing runs again.")
	case errors.Is(err, recovery.ErrNeedsAttention):
		// No Retry-After: retrying cannot help (docs/API.md section 2, rule 7).
		return problem.New(http.StatusConflict, problem.IdempotencyKeyNeedsAttention,
			"This Idempotency-Key's request began over 23 hours ago and did not finish, and Stripe shows nothing it did, so sending it again could act twice. "+
				"It waits for an operator, who re-drives it with `payments keys retry`; until then every retry gets this answer.")
	case errors.Is(err, payments.ErrPaymentProcessing):
		return problem.New(http.StatusConflict, problem.PaymentProcessing,
			"The payment is still processing: its creation has not finished, so its outcome is not known yet. Nothing was stored for this Idempotency-Key: retry it with the same key shortly.").WithRetryAfter(2)
	case db.IsUnavailable(err):
		// No commit is possible now: the connection to the database
		// failed or was lost (its machine died, a failover is under way),
		// it is no longer the primary, or the transaction ran out of its
		// deadline (PAYMENTS_DB_TX_TIMEOUT: a commit waiting on a lost
		// synchronous standby). The engine left the key at its last
		// committed recovery point and unlocks it as soon as the database
		// takes writes again (recovery's background unlock), so a retry to
		// any instance resumes it (docs/API.md section 11). Before the
		// context case: a transaction's own deadline is this, not an
		// interrupted request.
		return problem.New(http.StatusServiceUnavailable, problem.ServiceUnavailable,
			"The database cannot commit right now (it may be failing over). Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped.").WithRetryAfter(serviceUnavailableRetryAfter)
	case db.IsTemporary(err):
		// The server cut a statement short by a limit of its own (a
		// statement_timeout or lock_timeout an operator set) or ran short
		// of a resource (a full disk): nothing about the request is wrong,
		// the key stays at its last recovery point, and a retry resumes.
		return problem.New(http.StatusServiceUnavailable, problem.ServiceUnavailable,
			"The database could not finish this request within its limits right now. Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped.").WithRetryAfter(serviceUnavailableRetryAfter)
	case errors.Is(err, db.ErrSerialization):
		// Conflicts with requests for other keys, which kept the database
		// from running this one within its time budget: not 409, since no
		// other request holds this key (rule 5). Like an unreachable Stripe,
		// nothing final was stored, and a retry resumes.
		return problem.New(http.StatusServiceUnavailable, problem.PaymentProcessorUnavailable,
			"The service was too busy to run this request. Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped.").WithRetryAfter(1)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The request's context ended before its work did: the process is
		// shutting down (it cancels what is still running at its shutdown
		// timeout), or the client went away. For a request with a key, the
		// engine unlocked it at its last recovery point, so a retry to any
		// instance resumes it; a read is simply asked again.
		return problem.New(http.StatusServiceUnavailable, problem.PaymentProcessorUnavailable,
			"The request was interrupted before it finished (the service may be restarting). Nothing is lost: retry it (with the same Idempotency-Key, if it had one) and it resumes where it stopped.").WithRetryAfter(1)
	case recovery.IsTransient(err), errors.Is(err, recovery.ErrChildKeySpent), errors.Is(err, stripeclient.ErrChildKeySpent):
		// A wait the engine knows (the grace after Stripe's stored 500,
		// recovery.Config.SpentKeyGrace) is the client's too, in whole
		// seconds rounded up; otherwise a retry soon may well succeed.
		retryAfter := 2
		if d := recovery.RetryAfterOf(err); d > 0 {
			retryAfter = int(math.Ceil(d.Seconds()))
		}
		// In the words of the flow's remote side (recovery.Remote: the
		// payment flows' is Stripe, payments.Stripe). The code stays
		// payment_processor_unavailable whatever the remote: it tells the
		// client what to do (wait Retry-After, retry with the same key),
		// which is the same for every remote side; service_unavailable is
		// the database's (section 11), and a new code would be one more
		// that every client must learn to retry.
		unreachable := "A service this request depends on could not be reached."
		if r, ok := recovery.RemoteOf(err); ok && r.Unavailable != "" {
			unreachable = r.Unavailable
		}
		return problem.New(http.StatusServiceUnavailable, problem.PaymentProcessorUnavailable,
			"%s Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped.", unreachable).WithRetryAfter(retryAfter)
	case errors.Is(err, users.ErrUnknownKey):
		return problem.New(http.StatusUnauthorized, problem.Unauthorized, "The API key is not valid.")
	case errors.Is(err, webhooks.ErrSignature):
		return problem.New(http.StatusBadRequest, problem.WebhookSignatureInvalid, "The Stripe-Signature header does not verify.")
	case errors.Is(err, payments.ErrNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such payment.")
	case errors.Is(err, payments.ErrRefundNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such refund.")
	case errors.Is(err, events.ErrNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such event.")
	case errors.Is(err, merchanthooks.ErrEndpointNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such webhook endpoint.")
	case errors.Is(err, recovery.ErrKeyNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such idempotency key.")
	case errors.Is(err, merchanthooks.ErrInvalid), errors.Is(err, safehttp.ErrInvalidURL), errors.Is(err, currency.ErrUnsupported),
		errors.Is(err, currency.ErrAmountTooSmall), errors.Is(err, currency.ErrAmountTooLarge):
		return validationFailed("%s.", err)
	case db.ConnectionLost(err):
		// A broken connection nothing above classified: Stripe's are
		// transient by now, so this is the database's, from a statement
		// run outside a transaction (a read) whose driver did not wrap it.
		// Never a 500 (docs/API.md section 11).
		return problem.New(http.StatusServiceUnavailable, problem.ServiceUnavailable,
			"The database cannot commit right now (it may be failing over). Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped.").WithRetryAfter(serviceUnavailableRetryAfter)
	default:
		return problem.New(http.StatusInternalServerError, problem.Internal, "Something went wrong on our side; it has been logged.")
	}
}

// serviceUnavailableRetryAfter is service_unavailable's Retry-After, in
// seconds: a failover of the formation of docs/API.md section 11 takes
// writes again within 15 s, and a client that waits 2 s and then backs off
// exponentially (as the Go client does) is back within a few seconds of
// it, without hammering the service meanwhile.
const serviceUnavailableRetryAfter = 2

// queryParamError is a lookup by a query parameter (a list's
// starting_after) that failed: problemFor answers a not-found one 400.
type queryParamError struct {
	name, object, value string
	err                 error
}

func (e *queryParamError) Error() string { return e.name + ": " + e.err.Error() }
func (e *queryParamError) Unwrap() error { return e.err }

// inQueryParam marks err, from looking up object value given as the query
// parameter name, as the parameter's; nil stays nil.
func inQueryParam(name, object, value string, err error) error {
	if err == nil {
		return nil
	}
	return &queryParamError{name: name, object: object, value: value, err: err}
}

// isNotFound tells whether err says an object does not exist (or is another user's).
func isNotFound(err error) bool {
	return errors.Is(err, payments.ErrNotFound) || errors.Is(err, payments.ErrRefundNotFound) ||
		errors.Is(err, events.ErrNotFound) || errors.Is(err, merchanthooks.ErrEndpointNotFound) ||
		errors.Is(err, recovery.ErrKeyNotFound)
}

// writeError renders err as problem+json, logging it when it is ours to fix.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(err)
	if p.Status == http.StatusServiceUnavailable {
		s.metrics.unavailable.WithLabelValues(string(p.Code)).Inc()
	}
	switch {
	case p.Status == http.StatusServiceUnavailable: // Stripe or the database unreachable: expected now and then
		logger(r.Context()).WarnContext(r.Context(), "request deferred", slog.String("error", err.Error()))
	case p.Status >= 500:
		logger(r.Context()).ErrorContext(r.Context(), "request failed", slog.String("error", err.Error()))
	}
	problem.Write(w, p)
}
