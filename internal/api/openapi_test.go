package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
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
	handler := newHandler(t, api.Config{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
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

// What strict generators (ogen, oapi-codegen) and Spectral's oas ruleset need
// of the document, checked without them (make lint-api runs the tools
// themselves): a const says its type; a oneOf has a discriminator whose
// mapping names each of its schemas under the value that schema's
// discriminating property holds, so the mapping cannot send an object to a
// schema that would refuse it; every operation has a description; info has
// a contact.
func TestOpenAPI_meetsStrictGenerators(t *testing.T) {
	t.Parallel()
	var spec map[string]any
	require.NoError(t, json.Unmarshal(api.OpenAPIDocument(), &spec))
	schemas := spec["components"].(map[string]any)["schemas"].(map[string]any)

	var walk func(path string, node any)
	walk = func(path string, node any) {
		switch n := node.(type) {
		case []any:
			for i, v := range n {
				walk(fmt.Sprintf("%s/%d", path, i), v)
			}
		case map[string]any:
			if c, ok := n["const"]; ok {
				assert.Contains(t, n, "type", "%s: const %v without a type", path, c)
			}
			if oneOf, ok := n["oneOf"].([]any); ok {
				checkDiscriminator(t, path, n, oneOf, schemas)
			}
			for k, v := range n {
				walk(path+"/"+k, v)
			}
		}
	}
	walk("#", spec)

	for route, item := range spec["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			d, _ := op.(map[string]any)["description"].(string)
			assert.NotEmpty(t, strings.TrimSpace(d), "%s %s has no description", strings.ToUpper(method), route)
		}
	}
	assert.Contains(t, spec["info"], "contact")
}

// checkDiscriminator holds a oneOf to a discriminator with a mapping: every
// schema of the oneOf mapped, under the const its discriminating property
// holds, and nothing else mapped.
func checkDiscriminator(t *testing.T, path string, node map[string]any, oneOf []any, schemas map[string]any) {
	t.Helper()
	disc, ok := node["discriminator"].(map[string]any)
	if !assert.True(t, ok, "%s: a oneOf without a discriminator", path) {
		return
	}
	property, _ := disc["propertyName"].(string)
	mapping, _ := disc["mapping"].(map[string]any)
	require.NotEmpty(t, property, "%s: the discriminator names no property", path)
	require.NotEmpty(t, mapping, "%s: the discriminator has no mapping", path)
	want := map[string]any{}
	for _, s := range oneOf {
		ref, _ := s.(map[string]any)["$ref"].(string)
		name, found := strings.CutPrefix(ref, "#/components/schemas/")
		require.True(t, found, "%s: a oneOf schema that is no component: %v", path, s)
		prop, _ := schemas[name].(map[string]any)["properties"].(map[string]any)[property].(map[string]any)
		value, ok := prop["const"].(string)
		require.True(t, ok, "%s: %s's %q is no string const", path, name, property)
		require.Contains(t, schemas[name].(map[string]any)["required"], property, "%s: %s does not require %q", path, name, property)
		want[value] = ref
	}
	assert.Equal(t, want, mapping, "%s: the discriminator's mapping", path)
}
