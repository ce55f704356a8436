package stripesim

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxBodyBytes bounds a request body; stripe-go's are a few hundred bytes.
const maxBodyBytes = 1 << 20

// call is one /v1 request as the operations see it.
type call struct {
	requestID      string
	method         string
	path           string
	id             string // the {id} in the path, if any
	apiKey         string
	idempotencyKey string
	form           url.Values // body and query parameters, decoded

	claim *keyEntry // the idempotency key this request holds while it runs

	// processingFor is how long a confirmation this request makes stays
	// processing (FaultProcessing); 0: it is decided at once.
	processingFor time.Duration

	fault Fault // the fault that hit this request, if any (events_lag reads it)
}

func newCall(r *http.Request) *call {
	return &call{
		requestID:      newID("req"),
		method:         r.Method,
		path:           r.URL.Path,
		id:             r.PathValue("id"),
		idempotencyKey: strings.TrimSpace(r.Header.Get("Idempotency-Key")),
	}
}

// idempotent reports whether the idempotency layer applies. Like Stripe, it
// ignores keys on GET.
func (c *call) idempotent() bool {
	return c.method == http.MethodPost && c.idempotencyKey != ""
}

// parse authenticates the request and decodes its parameters.
func (c *call) parse(r *http.Request) *apiError {
	if e := c.authenticate(r); e != nil {
		return e
	}
	if len(c.idempotencyKey) > 255 {
		return invalidRequest(http.StatusBadRequest, "", "",
			"Idempotency-Key must be at most 255 characters long (got %d).", len(c.idempotencyKey))
	}
	r.Body = http.MaxBytesReader(nil, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		return invalidRequest(http.StatusBadRequest, "", "", "Invalid request body: %v", err)
	}
	c.form = r.Form
	return nil
}

// authenticate accepts a test secret key, sent as a bearer token (as
// stripe-go does) or as the basic-auth user name (as `curl -u sk_test_...:`
// does).
func (c *call) authenticate(r *http.Request) *apiError {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		key, _, _ = r.BasicAuth()
	}
	key = strings.TrimSpace(key)
	switch {
	case key == "":
		return unauthenticated("You did not provide an API key. You need to provide your API key in the " +
			"Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').")
	case !strings.HasPrefix(key, "sk_test_"):
		return unauthenticated("Invalid API Key provided: %s. The simulator accepts test secret keys (sk_test_...) only.",
			redactKey(key))
	}
	c.apiKey = key
	return nil
}

func redactKey(key string) string {
	if len(key) <= 12 {
		return strings.Repeat("*", len(key))
	}
	return key[:8] + strings.Repeat("*", len(key)-12) + key[len(key)-4:]
}

// allowOnly rejects parameters outside names, as Stripe does. A name covers
// its nested forms too: "metadata" allows metadata[order_id].
func (c *call) allowOnly(names ...string) *apiError {
	for param := range c.form {
		top, _, _ := strings.Cut(param, "[")
		if !slices.Contains(names, top) {
			return unknownParameter(param)
		}
	}
	return nil
}

// str returns a string parameter, "" when absent.
func (c *call) str(name string) string {
	return c.form.Get(name)
}

// amount returns an integer parameter in minor units, 0 when absent.
func (c *call) amount(name string) (int64, *apiError) {
	raw := c.form.Get(name)
	if raw == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, invalidRequest(http.StatusBadRequest, "parameter_invalid_integer", name, "Invalid integer: %s", raw)
	}
	if v < 1 || v > 99999999 {
		return 0, invalidRequest(http.StatusBadRequest, "parameter_invalid_integer", name,
			"This value must be between 1 and 99999999 (got %d).", v)
	}
	return v, nil
}

// boolean returns a boolean parameter, false when absent.
func (c *call) boolean(name string) (bool, *apiError) {
	switch raw := c.form.Get(name); raw {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, invalidParameter(name, "Invalid boolean: %s", raw)
	}
}

// oneOf returns an enumerated parameter, def when absent.
func (c *call) oneOf(name, def string, allowed ...string) (string, *apiError) {
	raw := c.form.Get(name)
	if raw == "" {
		return def, nil
	}
	if !slices.Contains(allowed, raw) {
		return "", invalidParameter(name, "Invalid %s: must be one of %s", name, strings.Join(allowed, ", "))
	}
	return raw, nil
}

// metadata collects the metadata[key]=value parameters.
func (c *call) metadata() metadata {
	md := metadata{}
	for param, values := range c.form {
		inner, ok := strings.CutPrefix(param, "metadata[")
		key, closed := strings.CutSuffix(inner, "]")
		if ok && closed && key != "" && len(values) > 0 && values[0] != "" {
			md = append(md, metadataPair{key, values[0]})
		}
	}
	slices.SortFunc(md, func(a, b metadataPair) int { return cmp.Compare(a.key, b.key) })
	return md
}
