package keyadmin_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyadmin"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/recovery"
)

// docs/API.md section 9: keys show tells a key's story "with any secret in
// it, such as a webhook endpoint's secret, masked". The stored answer of a
// POST /v1/webhook_endpoints holds the endpoint's signing secret; keys show
// used to print it whole, in text and JSON alike (both are the Story).
func TestAdmin_showMasksTheSecretsInTheStoredAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	flows := recovery.NewBuilder(recovery.Config{Pool: b.pool})
	hooks := merchanthooks.NewService(b.pool, flows)
	engine, err := flows.Build()
	require.NoError(t, err)
	body := `{"url":"https://example.com/hooks"}`
	resp, err := hooks.CreateEndpoint(ctx, recovery.Request{UserID: b.userID, Key: "endpoint-1", Method: "POST",
		Path: "/v1/webhook_endpoints", Body: []byte(body)}, merchanthooks.CreateParams{URL: "https://example.com/hooks", EnabledEvents: []string{"*"}})
	require.NoError(t, err)
	var created struct{ Secret string }
	require.NoError(t, json.Unmarshal(resp.Body, &created))
	require.Regexp(t, `^whsec_.{20,}$`, created.Secret)

	admin := keyadmin.New(b.pool, engine.Flows(), nil)
	story, err := admin.Show(ctx, alice, "endpoint-1")
	require.NoError(t, err)
	out, err := json.Marshal(story)
	require.NoError(t, err)
	require.NotContains(t, string(out), created.Secret)
	require.NotContains(t, string(out), created.Secret[6:len(created.Secret)-4], "no part of it but the last four")

	var answer map[string]any
	require.NoError(t, json.Unmarshal(story.Response.Body, &answer))
	require.Equal(t, "whsec_…"+created.Secret[len(created.Secret)-4:], answer["secret"], "the kind of secret and its last four, to tell it apart")
	require.Equal(t, "https://example.com/hooks", answer["url"], "the rest of the answer is as stored")
	require.Equal(t, "webhook_endpoint", answer["object"])
}

func TestMaskSecrets(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"id":"we_1","secret":"whsec_abcdefghijklmnopqrstuvwxyz012345"}`: `{"id":"we_1","secret":"whsec_…2345"}`,
		`{"secret":"hunter2"}`: `{"secret":"****"}`,
		`{"secret":""}`:        `{"secret":""}`, // nothing to hide
		`{"data":[{"note":"whsec_0123456789abcdef"}]}`:     `{"data":[{"note":"whsec_…cdef"}]}`,
		`{"a":{"secret":"s","n":1.50,"ok":true,"x":null}}`: `{"a":{"secret":"****","n":1.50,"ok":true,"x":null}}`,
		`["whsec_short"]`: `["whsec_…"]`,
		`{"z":1,"a":2,"m":"whsec_0123456789abcdef"}`:     `{"z":1,"a":2,"m":"whsec_…cdef"}`, // order kept
		`{"secret":{"inner":"x"}}`:                       `{"secret":{"inner":"x"}}`,
		`{"url":"https://e.com"}`:                        `{"url":"https://e.com"}`,
		`"whsec_0123456789abcdef"`:                       `"whsec_…cdef"`,
		`not json whsec_0123456789abcdef`:                `"not json whsec_…cdef"`,
		`{"note":"key whsec_0123456789abcdef, rotated"}`: `{"note":"key whsec_…cdef, rotated"}`,
	} {
		require.Equal(t, want, string(keyadmin.MaskSecrets([]byte(in))), in)
	}
}
