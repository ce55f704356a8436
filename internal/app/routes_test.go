package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/client"
	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/app"
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
}
