package stripesim_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stripesim"
)

func TestControlSurfaceIsLoopbackOnly(t *testing.T) {
	t.Parallel()
	f := setup(t)
	handler := f.sim.Handler()

	// httptest servers listen on loopback only, so a remote client is faked
	// on the request itself.
	for addr, want := range map[string]int{
		"203.0.113.7:5555": http.StatusForbidden,
		"10.0.0.1:5555":    http.StatusForbidden,
		"127.0.0.1:5555":   http.StatusOK,
		"[::1]:5555":       http.StatusOK,
	} {
		for _, path := range []string{"/_sim/requests", "/_sim/objects?type=refund"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.RemoteAddr = addr
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			require.Equal(t, want, rec.Code, "%s from %s", path, addr)
		}
	}
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.stripe.PaymentIntents.New(paymentIntent("log-1", "pm_card_chargeDeclined"))
	require.Error(t, err)
	_, err = f.stripe.PaymentIntents.Get("pi_missing", nil)
	require.Error(t, err)

	recs := f.requests(t)
	require.Len(t, recs, 2)
	require.Equal(t, stripesim.RequestRecord{
		RequestID: recs[0].RequestID, Method: "POST", Path: "/v1/payment_intents",
		IdempotencyKey: "log-1", Status: http.StatusPaymentRequired,
	}, recs[0])
	require.Equal(t, "GET", recs[1].Method)
	require.Equal(t, "/v1/payment_intents/pi_missing", recs[1].Path)
	require.Equal(t, http.StatusNotFound, recs[1].Status)
	require.Equal(t, recs, f.sim.Requests(), "the Go method and the route agree")
}

func TestObjectsList(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := paymentIntent("", "pm_card_visa")
	p.AddMetadata("order_id", "42")
	_, err := f.stripe.PaymentIntents.New(p)
	require.NoError(t, err)

	pis := f.objects(t, "payment_intent")
	require.Len(t, pis, 1)
	require.Equal(t, map[string]any{"order_id": "42"}, pis[0]["metadata"])
	require.Len(t, f.objects(t, "charge"), 1)
	require.Empty(t, f.objects(t, "refund"))
	require.Empty(t, f.objects(t, "customer"))
	require.Len(t, f.objects(t, "event"), 3, "created, charge succeeded, succeeded")

	f.control(t, http.MethodGet, "/_sim/objects?type=invoice", nil, http.StatusBadRequest, nil)
	f.control(t, http.MethodGet, "/_sim/objects", nil, http.StatusBadRequest, nil)
}

func TestFaultValidation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.control(t, http.MethodPost, "/_sim/faults", map[string]any{"kind": "meteor"}, http.StatusBadRequest, nil)
	f.control(t, http.MethodPost, "/_sim/faults", map[string]any{"kind": "delay", "sleep": 3}, http.StatusBadRequest, nil)
	f.control(t, http.MethodPost, "/_sim/faults", map[string]any{"kind": "delay", "count": -1}, http.StatusBadRequest, nil)
	require.Error(t, f.sim.AddFault(stripesim.Fault{Kind: "meteor"}))

	var armed stripesim.Fault
	f.control(t, http.MethodPost, "/_sim/faults", map[string]any{"kind": "error_500", "method": "post"}, http.StatusOK, &armed)
	require.Equal(t, stripesim.Fault{Kind: stripesim.FaultError500, Method: "POST", Count: 1}, armed)

	f.control(t, http.MethodGet, "/_sim/nothing", nil, http.StatusNotFound, nil)
}

func TestReset(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first, err := f.stripe.PaymentIntents.New(paymentIntent("before-reset", "pm_card_visa"))
	require.NoError(t, err)
	f.addFault(t, stripesim.Fault{PathPrefix: "/v1/refunds", Kind: stripesim.FaultError500})

	f.control(t, http.MethodPost, "/_sim/reset", nil, http.StatusOK, nil)

	for _, typ := range []string{"payment_intent", "charge", "refund", "customer", "event"} {
		require.Empty(t, f.objects(t, typ), typ)
	}
	require.Empty(t, f.requests(t))
	require.Empty(t, f.sim.Faults())
	_, err = f.stripe.PaymentIntents.Get(first.ID, nil)
	require.Error(t, err)

	again, err := f.stripe.PaymentIntents.New(paymentIntent("before-reset", "pm_card_visa"))
	require.NoError(t, err)
	require.NotEqual(t, first.ID, again.ID)
	require.False(t, replayed(again.LastResponse))
}
