package app_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/app"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/recovery"
)

// The README's table of recovery points, external calls and failpoints is
// the one the flows' declarations give (recovery.FlowTable), between its
// two markers. UPDATE_README=1 writes it.
func TestREADME_flowTableIsTheDeclarations(t *testing.T) {
	t.Parallel()
	const (
		begin = "<!-- flow table: generated from the flows' declarations, checked by internal/app's TestREADME_flowTableIsTheDeclarations (UPDATE_README=1 writes it) -->\n"
		end   = "<!-- end of flow table -->\n"
	)
	flows, err := app.DeclaredFlows()
	require.NoError(t, err)
	want := recovery.FlowTable(flows)

	const path = "../../README.md"
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	readme := string(raw)
	before, rest, ok := strings.Cut(readme, begin)
	require.True(t, ok, "README.md has no flow table marker")
	got, after, ok := strings.Cut(rest, end)
	require.True(t, ok, "README.md's flow table has no end marker")
	if os.Getenv("UPDATE_README") != "" {
		require.NoError(t, os.WriteFile(path, []byte(before+begin+want+end+after), 0o644))
		return
	}
	require.Equal(t, want, got, "README.md's flow table differs from the declarations: run UPDATE_README=1 go test ./internal/app -run TestREADME")
}

// A failpoint that no flow declares is refused at start-up, as the engine
// is built, naming it and the name it was likely meant to be, before
// anything connects (the database here answers nobody): a typo, or the
// engine's generic after_call: name for a payment flow's Stripe step (the
// payment flows call it after_stripe:), would never fire.
func TestNew_refusesAFailpointNoFlowDeclares(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	for spec, refused := range map[string]string{
		"after_stripe:payment_intent=crash":  "",
		"after_call:payment_intent=crash":    "after_call:payment_intent (did you mean after_stripe:payment_intent?)",
		"before_commit:payment_creatd=error": "before_commit:payment_creatd (did you mean before_commit:payment_created?)",
	} {
		fp, err := failpoint.Parse(spec)
		require.NoError(t, err)
		if refused == "" {
			a, err := app.New(context.Background(), app.Config{DatabaseURL: url, Failpoints: fp})
			require.NoError(t, err, spec)
			a.Close()
			continue
		}
		_, err = app.New(context.Background(), app.Config{DatabaseURL: "postgres://nobody@127.0.0.1:1/none", Failpoints: fp})
		require.ErrorIs(t, err, failpoint.ErrUnknown, spec)
		require.ErrorContains(t, err, refused, spec)
	}
}
