package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/openapitest"
)

// The document GET /openapi.json serves is the embedded one, needs no key,
// and is valid OpenAPI 3.1 (checked against the specification's schema).
func TestOpenAPI_servedWithoutKeyAndValid31(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, body := b.do(t, http.MethodGet, "/openapi.json", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, api.OpenAPIDocument(), body)

	var head struct{ OpenAPI string }
	require.NoError(t, json.Unmarshal(body, &head))
	require.Equal(t, "3.1.0", head.OpenAPI)
	_, err := openapitest.Parse(body)
	require.NoError(t, err)
}

// Every route the router serves is in the document, and the document lists
// no route the router does not serve.
func TestOpenAPI_listsEveryRoute(t *testing.T) {
	t.Parallel()
	handler := api.NewHandler(api.Config{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	var served []string
	require.NoError(t, chi.Walk(handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served = append(served, method+" "+route)
		return nil
	}))
	slices.Sort(served)

	doc, err := openapitest.Load()
	require.NoError(t, err)
	require.Equal(t, served, doc.Operations())
}

// The check fails when an answer does not match the document: here, real
// answers of the service, doctored as a code change would make them.
func TestOpenAPI_checkFailsOnAnswersTheDocumentDoesNotDescribe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	doc, err := openapitest.Load()
	require.NoError(t, err)

	req, _ := http.NewRequest(http.MethodPost, b.server.URL+pathPayments, strings.NewReader(visaBody))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Idempotency-Key", "openapi-doctored")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))

	// As served, the exchange conforms.
	require.NoError(t, doc.Check(req, []byte(visaBody), resp, body))

	// A field renamed in the response.
	renamed := bytes.Replace(body, []byte(`"amount_refunded"`), []byte(`"amount_refund"`), 1)
	require.NotEqual(t, body, renamed)
	require.ErrorContains(t, doc.Check(req, []byte(visaBody), resp, renamed), "the response does not conform")

	// A nullable field given a value of another type.
	var payment map[string]any
	require.NoError(t, json.Unmarshal(body, &payment))
	payment["failure_code"] = 42
	retyped, _ := json.Marshal(payment)
	require.ErrorContains(t, doc.Check(req, []byte(visaBody), resp, retyped), "the response does not conform")

	// A status the operation does not list.
	teapot := *resp
	teapot.StatusCode = http.StatusTeapot
	require.ErrorContains(t, doc.Check(req, []byte(visaBody), &teapot, body), "the response does not conform")

	// A 503 without Retry-After.
	unavailable := *resp
	unavailable.StatusCode = http.StatusServiceUnavailable
	unavailable.Header = http.Header{"Content-Type": {"application/problem+json"}}
	problem := []byte(`{"type":"https://example.com/p","title":"Service Unavailable","status":503,"code":"payment_processor_unavailable"}`)
	require.ErrorContains(t, doc.Check(req, []byte(visaBody), &unavailable, problem), "Retry-After")
	unavailable.Header.Set("Retry-After", "2")
	require.NoError(t, doc.Check(req, []byte(visaBody), &unavailable, problem))

	// A request the document forbids (a renamed field) that the service
	// took: the document and the code disagree about the request.
	forbidden := strings.Replace(visaBody, `"payment_method"`, `"pm"`, 1)
	require.ErrorContains(t, doc.Check(req, []byte(forbidden), resp, body), "the document forbids this request")
}

// A route the service answers and the document lacks fails the check.
func TestOpenAPI_checkFailsOnARouteNotInTheDocument(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var spec map[string]any
	require.NoError(t, json.Unmarshal(api.OpenAPIDocument(), &spec))
	delete(spec["paths"].(map[string]any), "/healthz")
	withoutHealth, err := json.Marshal(spec)
	require.NoError(t, err)
	doc, err := openapitest.Parse(withoutHealth)
	require.NoError(t, err)

	req, _ := http.NewRequest(http.MethodGet, b.server.URL+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.ErrorContains(t, doc.Check(req, nil, resp, body), "the route is not in the document")

	full, err := openapitest.Load()
	require.NoError(t, err)
	require.NoError(t, full.Check(req, nil, resp, body))
}
