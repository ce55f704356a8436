package app_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/client"
	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/app"
	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/route/routetest"
)

// The service's routes, as declared (api.Routes, the list the router is
// built from), agree with the OpenAPI document, the README's route table,
// the Go client and the flows the engine runs: a flow no route runs is
// refused unless it is named here with who runs it.
func TestRoutes_agreeWithTheContract(t *testing.T) {
	t.Parallel()
	flows, err := app.DeclaredFlows()
	require.NoError(t, err)
	routetest.Check(t, routetest.Contract{
		OpenAPI: api.OpenAPIDocument(), README: "../../README.md", Client: (*client.Client)(nil), Flows: flows,
		Unrouted: map[string]string{
			"refund_duplicate_charge": "the reconciler, for a second charge Stripe made (docs/failure-scenarios.md)",
		},
	}, api.Routes()...)

	// The event types a merchant may subscribe to and filter by
	// (events.Types) are those the routes declare they emit.
	var emitted []string
	for _, r := range api.Routes() {
		for _, e := range r.Events {
			if !slices.Contains(emitted, e) {
				emitted = append(emitted, e)
			}
		}
	}
	require.ElementsMatch(t, events.Types, emitted)
}
