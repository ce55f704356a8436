package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
)

// requireOneToOne checks, for a body decodeJSON took as req (what it
// returned), that its canonical JSON (what the request is fingerprinted by) and req determine
// each other: the canonical JSON of req written back is the body's, and the
// canonical JSON decodes to req again.
func requireOneToOne[T any](t testing.TB, body []byte, req T) {
	t.Helper()
	canonical, err := recovery.CanonicalJSON(body)
	require.NoError(t, err, "an accepted body %q has a fingerprint", body)
	written, err := json.Marshal(presentFields(req))
	require.NoError(t, err)
	fromReq, err := recovery.CanonicalJSON(written)
	require.NoError(t, err)
	require.Equal(t, string(canonical), string(fromReq), "body %q decoded to %+v", body, req)

	var again T
	_, err = decodeJSON(canonical, &again, true)
	require.NoError(t, err, "canonical %q of %q", canonical, body)
	require.Equal(t, req, again, "canonical %q of %q", canonical, body)
}

// presentFields is a request struct as a JSON object of its non-nil fields.
func presentFields(req any) map[string]any {
	v := reflect.ValueOf(req)
	out := map[string]any{}
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			out[name] = f.Interface()
		}
	}
	return out
}

func TestDecodeJSON_acceptedBodiesCorrespondToTheirCanonicalJSON(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`,
		`{"payment_method":"pm_card_visa","currency":"\u0075sd","amount":2000}`,
		` { "\u0061mount" : 2000 , "currency" : "usd", "payment_method" : "pm_card_visa" } `,
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","capture":true,"description":"\ud83d\ude00 \u00e9 <&> \u2028 \"\\/","metadata":{"b":"","a":"\ufffd","A":"x"}}`,
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","capture":false,"metadata":{}}`,
	} {
		var req createPaymentRequest
		taken, err := decodeJSON([]byte(body), &req, false)
		require.NoError(t, err, body)
		require.Equal(t, body, string(taken), "a body without null is taken as sent")
		requireOneToOne(t, taken, req)
	}
	var refund createRefundRequest
	body := `{"reason":"duplicate","amount":5,"payment":"pay_\u0031"}`
	taken, err := decodeJSON([]byte(body), &refund, false)
	require.NoError(t, err)
	requireOneToOne(t, taken, refund)
	var capture captureRequest
	taken, err = decodeJSON([]byte(`{"amount":10}`), &capture, true)
	require.NoError(t, err)
	requireOneToOne(t, taken, capture)
}

// API.md section 2: an optional field that is null is the same as the field
// left out, in the fingerprint too. decodeJSON takes such a body as the body
// without those members: the same request, the same canonical JSON.
func TestDecodeJSON_aNullFieldIsTheFieldLeftOut(t *testing.T) {
	t.Parallel()
	const rest = `"amount":2000,"currency":"usd","payment_method":"pm_card_visa"`
	for _, tt := range []struct{ withNull, without string }{
		{`{` + rest + `,"capture":null}`, `{` + rest + `}`},
		{`{"description":null,` + rest + `,"metadata":null,"capture":false}`, `{` + rest + `,"capture":false}`},
		{`{ "capture" : null , ` + rest + `, "description":"\u00e9 <&>" }`, `{` + rest + `,"description":"é <&>"}`},
		{`{"amount":null,"currency":"usd","payment_method":"pm_card_visa"}`, `{"currency":"usd","payment_method":"pm_card_visa"}`},
	} {
		var withNull, without createPaymentRequest
		taken, err := decodeJSON([]byte(tt.withNull), &withNull, false)
		require.NoError(t, err, tt.withNull)
		_, err = decodeJSON([]byte(tt.without), &without, false)
		require.NoError(t, err, tt.without)
		require.Equal(t, without, withNull, tt.withNull)
		requireOneToOne(t, taken, withNull)
		a, err := recovery.CanonicalJSON(taken)
		require.NoError(t, err)
		b, err := recovery.CanonicalJSON([]byte(tt.without))
		require.NoError(t, err)
		require.Equal(t, string(b), string(a), "the fingerprint of %s", tt.withNull)
	}
	var capture captureRequest
	taken, err := decodeJSON([]byte(`{"amount":null}`), &capture, true)
	require.NoError(t, err)
	require.Equal(t, `{}`, string(taken))
	require.Nil(t, capture.Amount)
}

// Each of these would decode to a request that its canonical JSON does not
// determine (or determines differently): all are refused.
func TestDecodeJSON_refusesWhatTheCanonicalJSONWouldNotMatch(t *testing.T) {
	t.Parallel()
	const rest = `"currency":"usd","payment_method":"pm_card_visa"`
	for _, body := range []string{
		`{"amount":100,"AMOUNT":5000,` + rest + `}`,
		`{"amount":100,"amount":5000,` + rest + `}`,
		`{"Amount":100,` + rest + `}`,
		`{"amount":100,` + rest + `,"de\u017fcription":"x"}`, // encoding/json folds ſ to s
		`{"amount":100,` + rest + `,"metadata":{"a":"1","\u0061":"2"}}`,
		`{"amount":100,` + rest + `,"metadata":{"a":null}}`, // a map's value: null would decode as ""
		`{"amount":-0,` + rest + `}`, `{"amount":1e2,` + rest + `}`, `{"amount":100.0,` + rest + `}`,
		`{"amount":100,` + rest + `,"description":"\ud800"}`,
		`{"amount":100,` + rest + `,"description":"\udc00\ud800"}`,
		"{\"amount\":100," + rest + ",\"description\":\"\xff\"}",
		`{"amount":100,` + rest + `,"description":"\u0000"}`,
		`{"amount":100,` + rest + `,"metadata":{"\u0000":"v"}}`,
		`null`, `{"amount":100,` + rest + `,"metadata":{"a":{"b":"c"}}}`, `{"amount":[100],` + rest + `}`,
		`{"amount":100,` + rest + `} {}`, `{"amount":100,` + rest + `}}`,
	} {
		var req createPaymentRequest
		_, err := decodeJSON([]byte(body), &req, false)
		var p *problem.Problem
		require.ErrorAs(t, err, &p, body)
		require.Equal(t, http.StatusBadRequest, p.Status, body)
		require.Equal(t, problem.ValidationFailed, p.Code, body)
	}
	var cancel struct{}
	for body, ok := range map[string]bool{`{"x":1}`: false, `{"x":null}`: false, ` `: true, `{}`: true} {
		_, err := decodeJSON([]byte(body), &cancel, true)
		require.Equal(t, ok, err == nil, "%s: %v", body, err)
	}
	var endpoint createEndpointRequest
	_, err := decodeJSON([]byte(`{"url":"https://example.com","enabled_events":[null]}`), &endpoint, false)
	require.Error(t, err, "an item of a list is no field: null is refused")
}

// The strict walk knows structs of pointers to scalars and maps of strings
// by their json tags; a request type with anything else would be decoded by
// rules the walk does not check.
func TestDecodeJSON_requestTypesAreWhatTheStrictWalkKnows(t *testing.T) {
	t.Parallel()
	for _, req := range []any{createPaymentRequest{}, captureRequest{}, createRefundRequest{}} {
		typ := reflect.TypeOf(req)
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			require.True(t, f.IsExported() && !f.Anonymous, "%s.%s", typ, f.Name)
			require.NotEmpty(t, name, "%s.%s has a json name", typ, f.Name)
			require.NotContains(t, opts, "string", "%s.%s", typ, f.Name)
			switch f.Type.Kind() {
			case reflect.Pointer:
				require.Contains(t, []reflect.Kind{reflect.Int64, reflect.String, reflect.Bool}, f.Type.Elem().Kind(), "%s.%s", typ, f.Name)
			case reflect.Map:
				require.Equal(t, reflect.TypeOf(map[string]string{}), f.Type, "%s.%s", typ, f.Name)
			default:
				require.Fail(t, "unexpected field type", "%s.%s is a %s", typ, f.Name, f.Type)
			}
		}
	}
}
