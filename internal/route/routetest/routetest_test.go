package routetest_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/route"
	"github.com/example/payments/internal/route/routetest"
)

// A document of one operation, POST /v1/widgets.
const doc = `{"openapi": "3.1.0",
 "paths": {"/v1/widgets": {"post": {
   "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/WidgetRequest"}}}},
   "responses": {"201": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Widget"}}}},
                 "400": {"description": "bad"}}}}},
 "components": {"schemas": {
   "WidgetRequest": {"type": "object", "properties": {"size": {"type": "integer"}}},
   "Widget": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}, "size": {"type": "integer"}}},
   "ErrorCode": {"enum": ["validation_failed"]},
   "EventType": {"enum": ["widget.made"]}}}}`

type widgetRequest struct {
	Size int `json:"size"`
}

type widget struct {
	ID   string `json:"id"`
	Size int    `json:"size"`
}

type widgetClient struct{}

func (widgetClient) CreateWidget() {}

func widgets() route.Route {
	return route.Route{
		Method: http.MethodPost, Path: "/v1/widgets", Summary: "makes a widget", Flow: "make_widget",
		Request: widgetRequest{}, Answer: widget{}, Status: http.StatusCreated,
		Errors: []route.Error{{Status: http.StatusBadRequest, Code: "validation_failed"}},
		Events: []string{"widget.made"}, Client: "CreateWidget",
	}
}

func contract(t *testing.T) routetest.Contract {
	readme := filepath.Join(t.TempDir(), "README.md")
	table := routetest.TableBegin + route.Table([]route.Route{widgets()}) + routetest.TableEnd
	require.NoError(t, os.WriteFile(readme, []byte("# widgets\n\n"+table), 0o644))
	return routetest.Contract{
		OpenAPI: []byte(doc), README: readme, Client: widgetClient{},
		Flows: []*recovery.Flow{recovery.NewFlow("make_widget", recovery.From(recovery.Started,
			recovery.LocalPhase(nil), recovery.Finished))},
	}
}

// A declaration that agrees with everything passes; each kind of
// disagreement is found, and said.
func TestProblems_findsEachKindOfDisagreement(t *testing.T) {
	t.Parallel()
	require.Empty(t, routetest.Problems(contract(t), widgets()))

	for name, tc := range map[string]struct {
		change func(*route.Route, *routetest.Contract)
		want   string
	}{
		"a route the document lacks": {func(r *route.Route, _ *routetest.Contract) { r.Path = "/v1/gadgets" }, "the OpenAPI document has no such operation"},
		"an operation no route declares": {func(r *route.Route, c *routetest.Contract) {
			c.OpenAPI = []byte(strings.Replace(doc, `"paths": {`, `"paths": {"/v1/other": {"get": {"responses": {}}}, `, 1))
		}, "GET /v1/other: the OpenAPI document has it, and no route declares it"},
		"a status the document does not answer": {func(r *route.Route, _ *routetest.Contract) {
			r.Errors = append(r.Errors, route.Error{Status: 409, Code: "validation_failed"})
		}, "the document answers [201 400], the declaration [201 400 409]"},
		"a code not in the enum":   {func(r *route.Route, _ *routetest.Contract) { r.Errors[0].Code = "widget_broken" }, `the code "widget_broken" is not in the document's ErrorCode enum`},
		"an event not in the enum": {func(r *route.Route, _ *routetest.Contract) { r.Events = []string{"widget.made", "widget.lost"} }, `the event type "widget.lost"`},
		"an event no route emits":  {func(r *route.Route, _ *routetest.Contract) { r.Events = nil }, `"widget.made" of the document's EventType enum is emitted by no route`},
		"a request field the document lacks": {func(r *route.Route, _ *routetest.Contract) {
			r.Request = struct {
				Size  int `json:"size"`
				Color int `json:"color"`
			}{}
		}, "the request's fields are [size] in the document, [color size]"},
		"an answer field the document lacks": {func(r *route.Route, _ *routetest.Contract) {
			r.Answer = struct {
				ID    string `json:"id"`
				Color string `json:"color"`
			}{}
		}, `has the field "color", which the document does not`},
		"an answer without a required field": {func(r *route.Route, _ *routetest.Contract) {
			r.Answer = struct {
				Size int `json:"size"`
			}{}
		}, `the document requires the answer's field "id"`},
		"a client without the method": {func(r *route.Route, _ *routetest.Contract) { r.Client = "MakeWidget" }, "has no method MakeWidget"},
		"no client and no reason":     {func(r *route.Route, _ *routetest.Contract) { r.Client = "" }, "names no client method, and does not say why"},
		"a flow the engine lacks":     {func(r *route.Route, _ *routetest.Contract) { r.Flow = "make_gadget" }, `its flow "make_gadget" is not one the engine runs`},
		"a flow no route runs":        {func(r *route.Route, _ *routetest.Contract) { r.Flow = "" }, `the flow "make_widget" is run by no route`},
		"a stale README table":        {func(r *route.Route, _ *routetest.Contract) { r.Summary = "makes a better widget" }, "route table differs from the declarations"},
	} {
		r, c := widgets(), contract(t)
		tc.change(&r, &c)
		problems := routetest.Problems(c, r)
		require.NotEmpty(t, problems, name)
		require.Contains(t, strings.Join(problems, "\n"), tc.want, name)
	}
}
