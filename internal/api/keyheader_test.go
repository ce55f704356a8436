package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
)

func TestParseIdempotencyKey(t *testing.T) {
	t.Parallel()
	max := strings.Repeat("k", api.MaxIdempotencyKeyLength)
	tests := []struct {
		name, value, want string
		ok                bool
	}{
		{"bare", "abc", "abc", true},
		{"a UUID", "8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{"every visible ASCII character", "!#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~", "!#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~", true},
		{"255 characters", max, max, true},
		{"a quote inside a bare key", `a"b`, `a"b`, true},
		{"a quote ending a bare key", `abc"`, `abc"`, true},
		{"RFC 8941 string", `"abc"`, "abc", true},
		{"string with an escaped quote", `"a\"b"`, `a"b`, true},
		{"string with an escaped backslash", `"a\\b"`, `a\b`, true},
		{"string of 255 characters", `"` + max + `"`, max, true},

		{"empty", "", "", false},
		{"empty string", `""`, "", false},
		{"256 characters", max + "k", "", false},
		{"string of 256 characters", `"` + max + `k"`, "", false},
		{"space", "a b", "", false},
		{"space in a string", `"a b"`, "", false},
		{"tab", "a\tb", "", false},
		{"NUL", "a\x00b", "", false},
		{"newline", "a\nb", "", false},
		{"DEL", "a\x7fb", "", false},
		{"non-ASCII", "clé", "", false},
		{"non-ASCII in a string", `"clé"`, "", false},
		{"lone quote", `"`, "", false},
		{"unterminated string", `"abc`, "", false},
		{"data after the string", `"abc"d`, "", false},
		{"two strings", `"a""b"`, "", false},
		{"unknown escape", `"a\b"`, "", false},
		{"escape at the end", `"abc\`, "", false},
		{"escaped closing quote", `"abc\"`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := api.ParseIdempotencyKey(tt.value)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

// quoteSFString writes key as an RFC 8941 sf-string.
func quoteSFString(key string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}

func FuzzParseIdempotencyKey(f *testing.F) {
	for _, seed := range []string{
		"abc", `"abc"`, `"a\"b"`, `"a\\b"`, `a"b`, "", `""`, `"`, `"abc`, `"abc"d`, `"a\b"`, "a b", "a\tb",
		"clé", "\x7f", strings.Repeat("k", 255), strings.Repeat("k", 256), `"` + strings.Repeat("k", 255) + `"`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		key, ok := api.ParseIdempotencyKey(value)
		if !ok {
			require.Empty(t, key)
			return
		}
		require.GreaterOrEqual(t, len(key), 1)
		require.LessOrEqual(t, len(key), api.MaxIdempotencyKeyLength)
		for i := 0; i < len(key); i++ {
			require.True(t, key[i] >= 0x21 && key[i] <= 0x7e, "byte %#x at %d of %q", key[i], i, key)
		}

		// The RFC 8941 string form of a valid key names the same key.
		again, ok := api.ParseIdempotencyKey(quoteSFString(key))
		require.True(t, ok, "quoted %q", quoteSFString(key))
		require.Equal(t, key, again)
		// A valid key that does not look quoted is itself.
		if !strings.HasPrefix(value, `"`) {
			require.Equal(t, value, key)
		}
	})
}

// Every request below is refused before anything is stored: no key row, no
// payment, nothing sent to Stripe.
func TestIdempotencyKeyHeader_missingOrInvalidStoresNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)

	send := func(header http.Header) (*http.Response, []byte) {
		h := http.Header{"Content-Type": {"application/json"}}
		for k, v := range header {
			h[k] = v
		}
		return b.do(t, http.MethodPost, pathPayments, aliceKey, strings.NewReader(visaBody), h)
	}

	resp, body := send(nil)
	requireProblem(t, resp, body, http.StatusBadRequest, "idempotency_key_missing")

	for name, value := range map[string]string{
		"empty":                   "",
		"256 characters":          strings.Repeat("k", 256),
		"space":                   "order 1",
		"non-ASCII":               "commande-é",
		"control character (tab)": "order\t1",
		"unterminated string":     `"order-1`,
		"data after the string":   `"order"-1`,
		"unknown escape":          `"order\1"`,
		"empty string":            `""`,
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := send(http.Header{"Idempotency-Key": {value}})
			requireProblem(t, resp, body, http.StatusBadRequest, "idempotency_key_invalid")
		})
	}
	resp, body = send(http.Header{"Idempotency-Key": {"one", "two"}})
	requireProblem(t, resp, body, http.StatusBadRequest, "idempotency_key_invalid")

	require.Zero(t, b.keyRows(t), "no key is stored")
	require.Zero(t, b.count(t, "SELECT count(*) FROM payments"))
	require.Empty(t, b.sim.Requests(), "nothing reached Stripe")
}

func TestIdempotencyKeyHeader_quotedFormNamesTheSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first, firstBody := b.post(t, aliceKey, pathPayments, `"order-1"`, visaBody)
	require.Equal(t, http.StatusCreated, first.StatusCode, string(firstBody))
	again, againBody := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	requireReplayOf(t, first, firstBody, again, againBody)

	// And the other way round, with escapes.
	first, firstBody = b.post(t, aliceKey, pathPayments, `a"b\c`, visaBody)
	require.Equal(t, http.StatusCreated, first.StatusCode, string(firstBody))
	again, againBody = b.post(t, aliceKey, pathPayments, `"a\"b\\c"`, visaBody)
	requireReplayOf(t, first, firstBody, again, againBody)

	require.Equal(t, "order-1", b.keyState(t, aliceKey, "order-1").Key)
	require.Equal(t, 2, b.keyRows(t))
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM payments"))
	require.Equal(t, 2, b.simIntentCreations())
}

func TestIdempotencyKeyHeader_255CharactersAreAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := strings.Repeat("k", api.MaxIdempotencyKeyLength)

	first, firstBody := b.post(t, aliceKey, pathPayments, key, visaBody)
	require.Equal(t, http.StatusCreated, first.StatusCode, string(firstBody))
	require.Equal(t, key, first.Header.Get("Idempotency-Key"))
	again, againBody := b.post(t, aliceKey, pathPayments, key, visaBody)
	requireReplayOf(t, first, firstBody, again, againBody)
	require.Equal(t, key, b.keyState(t, aliceKey, key).Key)
}
