package api

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/users"
)

func validationFailed(format string, args ...any) *problem.Problem {
	return problem.New(http.StatusBadRequest, problem.ValidationFailed, format, args...)
}

// toProblem is the one place where errors become HTTP statuses and codes:
// the sentinels of every package below api, the engine's included, and
// the problems the flows chose themselves. Anything it does not recognise
// is a 500 whose details stay in the log (and an idempotent request stays
// resumable: a retry with the same key picks it up).
func toProblem(err error) *problem.Problem {
	var p *problem.Problem
	switch {
	case errors.As(err, &p):
		return p
	case errors.Is(err, recovery.ErrKeyReused):
		return problem.New(http.StatusUnprocessableEntity, problem.IdempotencyKeyReused,
			"This Idempotency-Key was first used for a different request (method, path or body). Use a new key for a new request.")
	case errors.Is(err, recovery.ErrKeyInUse), errors.Is(err, recovery.ErrLockLost):
		return problem.New(http.StatusConflict, problem.IdempotencyKeyInUse,
			"A request with this Idempotency-Key is in progress. Retry with the same key shortly.").WithRetryAfter(1)
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
	case recovery.IsTransient(err):
		// A wait the engine knows (the grace after Stripe's stored 500,
		// recovery.Config.SpentKeyGrace) is the client's too, in whole
		// seconds rounded up; otherwise a retry soon may well succeed.
		retryAfter := 2
		if d := recovery.RetryAfterOf(err); d > 0 {
			retryAfter = int(math.Ceil(d.Seconds()))
		}
		return problem.New(http.StatusServiceUnavailable, problem.PaymentProcessorUnavailable,
			"The payment processor could not be reached. Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped.").WithRetryAfter(retryAfter)
	case errors.Is(err, users.ErrUnknownKey):
		return problem.New(http.StatusUnauthorized, problem.Unauthorized, "The API key is not valid.")
	case errors.Is(err, payments.ErrNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such payment.")
	case errors.Is(err, payments.ErrRefundNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such refund.")
	case errors.Is(err, events.ErrNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such event.")
	case errors.Is(err, merchanthooks.ErrEndpointNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such webhook endpoint.")
	default:
		return problem.New(http.StatusInternalServerError, problem.Internal, "Something went wrong on our side; it has been logged.")
	}
}

// writeError renders err as problem+json, logging it when it is ours to fix.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p := toProblem(err)
	switch {
	case p.Status == http.StatusServiceUnavailable: // Stripe unreachable: expected now and then
		logger(r.Context()).WarnContext(r.Context(), "request deferred", slog.String("error", err.Error()))
	case p.Status >= 500:
		logger(r.Context()).ErrorContext(r.Context(), "request failed", slog.String("error", err.Error()))
	}
	problem.Write(w, p)
}
