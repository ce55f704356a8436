package api

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/users"
)

func validationFailed(format string, args ...any) *problem.Problem {
	return problem.New(http.StatusBadRequest, problem.ValidationFailed, format, args...)
}

// toProblem is the one place where errors become HTTP statuses and codes.
// Anything it does not recognise is a 500 whose details stay in the log.
func toProblem(err error) *problem.Problem {
	var p *problem.Problem
	switch {
	case errors.As(err, &p):
		return p
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
