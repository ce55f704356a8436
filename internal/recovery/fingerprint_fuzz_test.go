package recovery_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
)

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", "{}"},
		{" \n\t", "{}"},
		{"{}", "{}"},
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"{ \"b\" : [ 1 , {\"d\":1,\"c\":2} ] ,\n\"a\":null }", `{"a":null,"b":[1,{"c":2,"d":1}]}`},
		{`{"n":1.50,"m":2e3,"k":-0}`, `{"k":-0,"m":2e3,"n":1.50}`}, // numbers keep their text
		{`{"s":"\u0061<>&\/"}`, `{"s":"a<>&/"}`},
		{`{"a":1,"a":2}`, `{"a":2}`}, // the last duplicate wins, as in decoding
		{`"x"`, `"x"`},
		{`[3,1,2]`, `[3,1,2]`}, // arrays keep their order
	}
	for _, tt := range tests {
		got, err := recovery.CanonicalJSON([]byte(tt.in))
		require.NoError(t, err, "%q", tt.in)
		require.Equal(t, tt.want, string(got), "%q", tt.in)
	}
	for _, bad := range []string{"{", "{}}", "[1]]", `{"a":1}]`, "1 2", "{} x", "{}{}", `{"a":}`, "nul", "\xef\xbb\xbf{}"} {
		_, err := recovery.CanonicalJSON([]byte(bad))
		require.Error(t, err, "%q is not one JSON value", bad)
	}
}

func TestFingerprint_methodPathAndCanonicalBody(t *testing.T) {
	t.Parallel()
	fp := func(method, path, body string) []byte {
		f, err := recovery.Fingerprint(method, path, []byte(body))
		require.NoError(t, err)
		require.Len(t, f, 32)
		return f
	}
	base := fp("POST", "/v1/payments", `{"amount":1,"currency":"usd"}`)
	require.Equal(t, base, fp("POST", "/v1/payments", "{ \"currency\": \"usd\",\n \"amount\": 1 }"))
	require.Equal(t, base, fp("POST", "/v1/payments", `{"amount":1,"\u0063urrency":"\u0075sd"}`),
		"strings and keys are compared decoded, as the API's decoder reads them")
	require.NotEqual(t, base, fp("POST", "/v1/payments", `{"amount":2,"currency":"usd"}`))
	for _, other := range []string{`{"amount":1.0,"currency":"usd"}`, `{"amount":1e0,"currency":"usd"}`,
		`{"AMOUNT":1,"currency":"usd"}`, `{"amount":1,"currency":"usd","description":null}`} {
		require.NotEqual(t, base, fp("POST", "/v1/payments", other),
			"%s keeps its spelling: the API's decoder refuses it, or (a null field) drops it before fingerprinting, rather than read it as the base request", other)
	}
	require.NotEqual(t, base, fp("POST", "/v1/refunds", `{"amount":1,"currency":"usd"}`))
	require.NotEqual(t, base, fp("PUT", "/v1/payments", `{"amount":1,"currency":"usd"}`))
	require.Equal(t, fp("POST", "/v1/payments/pay_1/capture", ""), fp("POST", "/v1/payments/pay_1/capture", "{}"),
		"an empty body is the empty object")
	_, err := recovery.Fingerprint("POST", "/v1/payments", []byte("{"))
	require.Error(t, err)
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, seed := range []string{
		"", " ", "{}", "[]", "null", "true", "0", "-1.5e+10", `"s"`, `{"b":1,"a":2}`,
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"z":"1","a":"2"}}`,
		"{ \"a\" : [ 1, 2, {\"y\": null, \"x\": true} ] }\n", `{"a":1,"a":2}`, `{"s":"\u00e9\ud83d\ude00<>&\u2028"}`,
		"\"\xff\"", `{"":0}`, "{}}", "[1]]", "1 2", `{"a":}`, "[[[[[[[[[[]]]]]]]]]]",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		canonical, err := recovery.CanonicalJSON(body)
		blank := len(bytes.TrimSpace(body)) == 0
		if err != nil {
			require.False(t, blank, "a blank body is {}")
			require.False(t, json.Valid(body), "valid JSON %q was refused: %v", body, err)
			return
		}
		require.True(t, blank || json.Valid(body), "invalid JSON %q was accepted as %q", body, canonical)
		require.True(t, json.Valid(canonical), "%q", canonical)

		again, err := recovery.CanonicalJSON(canonical)
		require.NoError(t, err)
		require.Equal(t, string(canonical), string(again), "canonical JSON is a fixed point")

		// Another key order and other white space are the same document.
		var v any
		dec := json.NewDecoder(bytes.NewReader(canonical))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&v))
		for _, variant := range []string{writeJSON(v, true, "\n  "), writeJSON(v, false, " \t")} {
			got, err := recovery.CanonicalJSON([]byte(variant))
			require.NoError(t, err, "%q", variant)
			require.Equal(t, string(canonical), string(got), "variant %q", variant)
		}
	})
}

// writeJSON writes v with its object keys in reverse (or sorted) order and
// space between every token.
func writeJSON(v any, reverse bool, space string) string {
	var b strings.Builder
	var write func(v any)
	write = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if reverse {
				sort.Sort(sort.Reverse(sort.StringSlice(keys)))
			}
			b.WriteString("{" + space)
			for i, k := range keys {
				if i > 0 {
					b.WriteString(space + "," + space)
				}
				name, _ := json.Marshal(k) // HTML-escaped: another spelling of the same string
				b.Write(name)
				b.WriteString(space + ":" + space)
				write(v[k])
			}
			b.WriteString(space + "}")
		case []any:
			b.WriteString("[" + space)
			for i, e := range v {
				if i > 0 {
					b.WriteString("," + space)
				}
				write(e)
			}
			b.WriteString(space + "]")
		default:
			raw, err := json.Marshal(v)
			if err != nil {
				panic(fmt.Sprintf("re-encoding %v: %v", v, err))
			}
			b.Write(raw)
		}
	}
	write(v)
	return space + b.String() + space
}
