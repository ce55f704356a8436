package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/users"
)

// Code is the stable, machine-readable name of an error, sent as the
// problem's "code". Clients switch on it; it never changes meaning.
type Code string

// The codes of API.md, plus method_not_allowed.
const (
	CodeUnauthorized         Code = "unauthorized"
	CodeNotFound             Code = "not_found"
	CodeMethodNotAllowed     Code = "method_not_allowed"
	CodeValidationFailed     Code = "validation_failed"
	CodeUnsupportedMediaType Code = "unsupported_media_type"
	CodeBodyTooLarge         Code = "body_too_large"
	CodeInternal             Code = "internal"
)

// Problem is an RFC 9457 problem detail, and an error a handler can return.
type Problem struct {
	Status int    `json:"status"`
	Code   Code   `json:"code"`
	Title  string `json:"title"`
	Detail string `json:"detail,omitempty"`
	Type   string `json:"type"`
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail) }

// problemTypeBase prefixes each code to make the problem's type URI.
const problemTypeBase = "https://github.com/example/payments/blob/main/docs/errors.md#"

func newProblem(status int, code Code, detail string) *Problem {
	return &Problem{Status: status, Code: code, Title: http.StatusText(status), Detail: detail, Type: problemTypeBase + string(code)}
}

func validationFailed(format string, args ...any) *Problem {
	return newProblem(http.StatusBadRequest, CodeValidationFailed, fmt.Sprintf(format, args...))
}

// toProblem is the one place where errors become HTTP statuses and codes.
// Anything it does not recognise is a 500 whose details stay in the log.
func toProblem(err error) *Problem {
	var p *Problem
	switch {
	case errors.As(err, &p):
		return p
	case errors.Is(err, users.ErrUnknownKey):
		return newProblem(http.StatusUnauthorized, CodeUnauthorized, "The API key is not valid.")
	case errors.Is(err, payments.ErrNotFound):
		return newProblem(http.StatusNotFound, CodeNotFound, "No such payment.")
	default:
		return newProblem(http.StatusInternalServerError, CodeInternal, "Something went wrong on our side; it has been logged.")
	}
}

// writeError renders err as problem+json, logging it when it is ours to fix.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p := toProblem(err)
	if p.Status >= 500 {
		logger(r.Context()).ErrorContext(r.Context(), "request failed", slog.String("error", err.Error()))
	}
	writeProblem(w, p)
}

func writeProblem(w http.ResponseWriter, p *Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	encodeJSON(w, p)
}
