package api_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
)

// nullRoute makes, for one route that takes a JSON body, a fresh request
// the route accepts: the path (on objects made for it) and a body holding
// its required fields only. Each call makes new objects, so that a request
// may be sent under a new key and succeed.
type nullRoute func(t *testing.T, b *testBundle, n int) (path string, body map[string]any)

// nullRoutes are the routes of the OpenAPI document with a request body,
// keyed as the document writes them. Stripe's webhooks are not among them:
// that body is Stripe's event, signed and read as Stripe sends it.
var nullRoutes = map[string]nullRoute{
	"POST /v1/payments": func(*testing.T, *testBundle, int) (string, map[string]any) {
		return pathPayments, map[string]any{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}
	},
	"POST /v1/payments/{id}/capture": func(t *testing.T, b *testBundle, n int) (string, map[string]any) {
		pay := b.createPayment(t, aliceKey, fmt.Sprintf("null-auth-%d", n), authoriseBody)
		return capturePath(pay.ID), map[string]any{}
	},
	"POST /v1/payments/{id}/cancel": func(t *testing.T, b *testBundle, n int) (string, map[string]any) {
		pay := b.createPayment(t, aliceKey, fmt.Sprintf("null-auth-%d", n), authoriseBody)
		return "/v1/payments/" + pay.ID + "/cancel", map[string]any{}
	},
	"POST /v1/refunds": func(t *testing.T, b *testBundle, n int) (string, map[string]any) {
		pay := b.captured(t, aliceKey, fmt.Sprintf("null-pay-%d", n), 2000)
		return pathRefunds, map[string]any{"payment": pay.ID}
	},
	"POST /v1/events/{id}/redeliver": func(t *testing.T, b *testBundle, n int) (string, map[string]any) {
		id := fmt.Sprintf("evt_null_%d", n)
		b.insertEvent(t, "alice@example.com", id, "payment.succeeded")
		return "/v1/events/" + id + "/redeliver", map[string]any{}
	},
	"POST /v1/webhook_endpoints": func(*testing.T, *testBundle, int) (string, map[string]any) {
		return "/v1/webhook_endpoints", map[string]any{"url": "https://example.com/hooks"}
	},
}

// Issue 42, item 5 (API.md section 2): an optional field that is null is
// the same as the field left out, in the request's fingerprint too, and a
// required field that is null is 400 validation_failed. Generated clients
// send null for what the caller did not set. Every route of the OpenAPI
// document with a request body, every property of its schema: an optional
// one sent as null succeeds, and the same key with the field left out is
// its replay (Idempotent-Replayed, the same answer byte for byte, not 422);
// a required one sent as null is refused, nothing stored for the key.
func TestNullField_isTheFieldLeftOut_perRouteOfTheOpenAPIDocument(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var spec struct {
		Paths map[string]map[string]struct {
			RequestBody *struct {
				Content map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					}
				}
			} `json:"requestBody"`
		}
		Components struct {
			Schemas map[string]struct {
				Required   []string
				Properties map[string]json.RawMessage
			}
		}
	}
	require.NoError(t, json.Unmarshal(api.OpenAPIDocument(), &spec))

	n, optional, required := 0, 0, 0
	for route, ops := range spec.Paths {
		for method, op := range ops {
			if op.RequestBody == nil || route == "/v1/stripe/webhooks" {
				continue
			}
			name := strings.ToUpper(method) + " " + route
			fixture, ok := nullRoutes[name]
			require.True(t, ok, "%s takes a body: add it to nullRoutes", name)
			ref := op.RequestBody.Content["application/json"].Schema.Ref
			schema, ok := spec.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
			require.True(t, ok, "%s: the schema %q", name, ref)

			for prop := range schema.Properties {
				n++
				path, body := fixture(t, b, n)
				key := fmt.Sprintf("null-%d", n)
				withNull := maps.Clone(body)
				withNull[prop] = nil
				if slices.Contains(schema.Required, prop) {
					required++
					resp, data := b.post(t, aliceKey, path, key, mustJSON(t, withNull))
					requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", prop)
					resp, data = b.do(t, http.MethodGet, "/v1/idempotency_keys/"+key, aliceKey, nil, nil)
					requireProblem(t, resp, data, http.StatusNotFound, "not_found")
					continue
				}
				optional++
				first, firstData := b.post(t, aliceKey, path, key, mustJSON(t, withNull))
				require.Contains(t, []int{http.StatusOK, http.StatusCreated}, first.StatusCode,
					"%s with %s null: %s", name, prop, firstData)
				again, againData := b.post(t, aliceKey, path, key, mustJSON(t, body))
				require.Equal(t, first.StatusCode, again.StatusCode, "%s: %s left out, under the key of %s null: %s", name, prop, prop, againData)
				require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"), "%s: %s left out is the replay of %s null", name, prop, prop)
				require.Equal(t, string(firstData), string(againData))
			}
		}
	}
	require.Len(t, nullRoutes, 6, "every fixture is a route of the document")
	// The document's request schemas, as of this test: 8 optional
	// properties (capture, description, metadata; capture's amount;
	// refund's amount, reason; enabled_events, description) and 5 required.
	require.Equal(t, 8, optional, "optional properties tried")
	require.Equal(t, 5, required, "required properties tried")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return string(data)
}
