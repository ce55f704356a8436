package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/example/payments/internal/payments"
)

// listPayments answers GET /v1/payments?limit=N&starting_after=ID: the
// caller's payments, newest first.
func (s *Server) listPayments(w http.ResponseWriter, r *http.Request) error {
	params, err := listParams(r)
	if err != nil {
		return err
	}
	page, hasMore, err := payments.List(r.Context(), s.pool, userFrom(r.Context()).ID, params)
	if errors.Is(err, payments.ErrNotFound) {
		return validationFailed("starting_after: no such payment %q", params.StartingAfter)
	}
	if err != nil {
		return err
	}
	data := make([]paymentJSON, 0, len(page))
	for _, p := range page {
		data = append(data, toPaymentJSON(p))
	}
	writeJSON(w, http.StatusOK, toList(data, hasMore))
	return nil
}

// listParams reads limit (1..100, default 10) and starting_after.
func listParams(r *http.Request) (payments.ListParams, error) {
	q := r.URL.Query()
	p := payments.ListParams{Limit: 10, StartingAfter: q.Get("starting_after")}
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 100 {
			return p, validationFailed("limit must be an integer from 1 to 100, not %q", raw)
		}
		p.Limit = n
	}
	return p, nil
}
