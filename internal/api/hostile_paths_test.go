package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 14, item 4, in paths and query strings: an id that cannot exist is
// 404 (as any unknown id), a query parameter is 400; neither is stored.
func TestHostileText_pathsAndQueries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{
		"/v1/payments/pay_%00", "/v1/payments/pay_%ff", "/v1/payments/pay_%c3",
		"/v1/refunds/re_%00", "/v1/refunds/re_%ff",
		"/v1/idempotency_keys/a%00b", "/v1/idempotency_keys/a%ffb", "/v1/idempotency_keys/a%20b",
		// The routes of API.md section 7.
		"/v1/events/evt_%00", "/v1/events/evt_%ff", "/v1/events/evt_%00/deliveries",
		"/v1/webhook_endpoints/we_%00", "/v1/webhook_endpoints/we_%c3",
	} {
		t.Run(path, func(t *testing.T) {
			resp, data := b.do(t, http.MethodGet, path, aliceKey, nil, nil)
			requireProblem(t, resp, data, http.StatusNotFound, "not_found")
		})
	}
	t.Run("DELETE /v1/webhook_endpoints/we_%00", func(t *testing.T) {
		resp, data := b.do(t, http.MethodDelete, "/v1/webhook_endpoints/we_%00", aliceKey, nil, nil)
		requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	})
	for _, path := range []string{"/v1/payments/pay_%00/capture", "/v1/payments/pay_%ff/cancel", "/v1/events/evt_%ff/redeliver"} {
		t.Run(path, func(t *testing.T) {
			resp, data := b.post(t, aliceKey, path, "action-1", "")
			requireProblem(t, resp, data, http.StatusNotFound, "not_found")
		})
	}
	for _, path := range []string{
		"/v1/payments?starting_after=%00", "/v1/payments?starting_after=pay_%ff", "/v1/payments?limit=%00",
		"/v1/events?starting_after=%ff", "/v1/events?starting_after=%00", "/v1/events?starting_after=evt_%e2%82",
		"/v1/payments?x=%00", "/v1/payments?starting_after=%zz",
		"/v1/events?type=%00", "/v1/events?type=payment.%ff", "/v1/webhook_endpoints?starting_after=we_%00",
	} {
		t.Run(path, func(t *testing.T) {
			resp, data := b.do(t, http.MethodGet, path, aliceKey, nil, nil)
			requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", "query")
		})
	}
	t.Run("POST with a NUL in the query", func(t *testing.T) {
		resp, data := b.post(t, aliceKey, pathPayments+"?expand=%00", "order-1", visaBody)
		requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", "query")
	})
	b.requireNothingStored(t, 0, 0, 0)

	pay := b.createPayment(t, aliceKey, "order-1", visaBody)
	require.Equal(t, pay.ID, b.getPayment(t, aliceKey, pay.ID).ID)
	require.Len(t, b.list(t, aliceKey, "?starting_after=").Data, 1, "an empty value is no cursor")
}
