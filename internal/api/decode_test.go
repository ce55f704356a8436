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

// requireOneToOne checks, for a body decodeJSON accepted as req, that its
// canonical JSON (what the request is fingerprinted by) and req determine
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
	require.NoError(t, decodeJSON(canonical, &again, true), "canonical %q of %q", canonical, body)
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
		require.NoError(t, decodeJSON([]byte(body), &req, false), body)
		requireOneToOne(t, []byte(body), req)
	}
	var refund createRefundRequest
	body := `{"reason":"duplicate","amount":5,"payment":"pay_\u0031"}`
	require.NoError(t, decodeJSON([]byte(body), &refund, false))
	requireOneToOne(t, []byte(body), refund)
	var capture captureRequest
	require.NoError(t, decodeJSON([]byte(`{"amount":10}`), &capture, true))
	requireOneToOne(t, []byte(`{"amount":10}`), capture)
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
		`{"amount":100,` + rest + `,"description":null}`,
		`{"amount":100,` + rest + `,"metadata":null}`,
		`{"amount":100,` + rest + `,"metadata":{"a":null}}`,
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
		err := decodeJSON([]byte(body), &req, false)
		var p *problem.Problem
		require.ErrorAs(t, err, &p, body)
		require.Equal(t, http.StatusBadRequest, p.Status, body)
		require.Equal(t, problem.ValidationFailed, p.Code, body)
	}
	var cancel struct{}
	require.Error(t, decodeJSON([]byte(`{"x":1}`), &cancel, true))
	require.NoError(t, decodeJSON([]byte(` `), &cancel, true))
	require.NoError(t, decodeJSON([]byte(`{}`), &cancel, true))
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
