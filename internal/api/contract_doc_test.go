package api_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/console"
)

// The API reference (docs/API.md), the OpenAPI document (openapi.json, served
// at GET /openapi.json) and the router must tell one story: the same routes,
// the same success status for each, the same error codes. The other OpenAPI
// tests hold the service's answers to the document, and the router's routes to
// the document's; these hold the document to the reference people read.

// contractDocPath is docs/API.md, from this package's directory.
const contractDocPath = "../../docs/API.md"

// routeTableSections are the sections of docs/API.md whose `| route |` tables
// are routes of the JSON API, which the OpenAPI document describes and the
// router serves.
var routeTableSections = []int{2, 7}

// consoleSections are the sections whose `| route |` tables are the
// operator's console's routes (/console...): HTML pages for people, signed in
// with their own token, which the OpenAPI document does not describe (it
// describes the JSON API of sections 2, 5 and 7, docs/API.md section 8). They
// are compared with the console's router (console.Routes), both ways.
var consoleSections = []int{10}

// routeTablesOutsideOpenAPI are the other sections with a `| route |` table,
// each with why its routes are compared with neither the OpenAPI document nor
// a router. A `| route |` table in a section listed in none of these places
// fails the test, so that a new table is a decision.
var routeTablesOutsideOpenAPI = map[int]string{
	4: "the Stripe simulator's control surface (/_sim/...): another server, internal/stripesim, not this API",
}

// notYetImplemented lists the disagreements expected today, one line each:
// what docs/API.md promises and the service does not have yet. Delete a row
// when the work that makes it true merges: the test fails on a row that no
// longer disagrees, as it does on any disagreement not listed here.
var notYetImplemented = map[string]string{}

func TestContractDoc_agreesWithOpenAPIAndRouter(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(contractDocPath)
	require.NoError(t, err)

	found, err := contractDisagreements(doc, api.OpenAPIDocument(), servedRoutes(t))
	require.NoError(t, err)
	consoleFound, err := consoleDisagreements(doc, consoleRoutes(t))
	require.NoError(t, err)
	found = append(found, consoleFound...)

	var unexpected, stale []string
	for _, d := range found {
		if _, ok := notYetImplemented[d]; !ok {
			unexpected = append(unexpected, d)
		}
	}
	for _, d := range slices.Sorted(maps.Keys(notYetImplemented)) {
		if !slices.Contains(found, d) {
			stale = append(stale, d)
		}
	}
	assert.Empty(t, unexpected, "docs/API.md, internal/api/openapi.json and the router disagree: fix the one that is wrong "+
		"(or, for a promise the service does not keep yet, add a row to notYetImplemented)")
	assert.Empty(t, stale, "these rows of notYetImplemented agree now: delete them")
}

// The reference has the tables and the list the check reads: were it to lose
// them (a heading renamed, a table reshaped), the check would compare nothing.
func TestContractDoc_parsesTheReference(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(contractDocPath)
	require.NoError(t, err)
	ref, err := parseContractDoc(doc)
	require.NoError(t, err)

	var sections []int
	for s := range ref.routes {
		sections = append(sections, s)
	}
	slices.Sort(sections)
	want := slices.Concat(routeTableSections, consoleSections, slices.Collect(maps.Keys(routeTablesOutsideOpenAPI)))
	slices.Sort(want)
	require.Equal(t, want, sections, "the sections of docs/API.md with a `| route |` table")

	// A few rows and codes that have always been there, read as they should be.
	require.Equal(t, 201, ref.routes[2]["POST /v1/payments"])
	require.Equal(t, 200, ref.routes[2]["GET /v1/payments"], "the query string is not part of the route")
	require.Equal(t, 200, ref.routes[7]["DELETE /v1/webhook_endpoints/{id}"])
	require.Contains(t, ref.routes[10], "GET /console/webhook_endpoints/{id}", "two routes in one cell")
	require.Contains(t, ref.codes, "idempotency_key_in_use")
	require.Contains(t, ref.codes, "internal")
	require.NotContains(t, ref.codes, "decline_code", "a field named in parentheses is not a code")
	require.NotContains(t, ref.codes, "Retry-After")
}

// The check finds each kind of disagreement: the real reference, doctored as a
// careless edit would, against the real document and router.
func TestContractDoc_findsEachKindOfDisagreement(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(contractDocPath)
	require.NoError(t, err)
	routes := servedRoutes(t)
	baseline, err := contractDisagreements(doc, api.OpenAPIDocument(), routes)
	require.NoError(t, err)

	doctor := func(t *testing.T, old, new string) []string {
		t.Helper()
		s := string(doc)
		require.Equal(t, 1, strings.Count(s, old), "the text to doctor: %q", old)
		found, err := contractDisagreements([]byte(strings.Replace(s, old, new, 1)), api.OpenAPIDocument(), routes)
		require.NoError(t, err)
		var added []string
		for _, d := range found {
			if !slices.Contains(baseline, d) {
				added = append(added, d)
			}
		}
		return added
	}

	t.Run("a route documented and neither described nor served", func(t *testing.T) {
		added := doctor(t, "| `GET /v1/refunds/{id}` | naturally | 200 Refund |",
			"| `GET /v1/refunds/{id}` | naturally | 200 Refund |\n| `GET /v1/disputes/{id}` | naturally | 200 Dispute |")
		require.ElementsMatch(t, []string{
			"route GET /v1/disputes/{id}: in docs/API.md, not in the OpenAPI document",
			"route GET /v1/disputes/{id}: in docs/API.md, not served by the router",
		}, added)
	})
	t.Run("a route described and served but not documented", func(t *testing.T) {
		added := doctor(t, "| `GET /v1/refunds/{id}` | naturally | 200 Refund |\n", "")
		require.Equal(t, []string{"route GET /v1/refunds/{id}: in the OpenAPI document, not in docs/API.md"}, added)
	})
	t.Run("another success status", func(t *testing.T) {
		added := doctor(t, "| `POST /v1/refunds` | yes, key required | 201 Refund |",
			"| `POST /v1/refunds` | yes, key required | 200 Refund |")
		require.Equal(t, []string{"success of POST /v1/refunds: docs/API.md says 200, the OpenAPI document [201]"}, added)
	})
	t.Run("a code documented and not in the document", func(t *testing.T) {
		added := doctor(t, "`refund_not_allowed`, `payment_disputed`, `payment_not_capturable`,",
			"`refund_not_allowed`, `payment_disputed`, `payment_charged_back` (409), `payment_not_capturable`,")
		require.Equal(t, []string{"code payment_charged_back: in docs/API.md, not in the OpenAPI document"}, added)
	})
	t.Run("a code in the document and not documented", func(t *testing.T) {
		added := doctor(t, "`refund_not_allowed`, `payment_disputed`, `payment_not_capturable`,", "`payment_disputed`, `payment_not_capturable`,")
		require.Equal(t, []string{"code refund_not_allowed: in the OpenAPI document, not in docs/API.md"}, added)
	})
	t.Run("a console route documented and not served, and one served and not documented", func(t *testing.T) {
		s := strings.Replace(string(doc), "`GET /console/receipts`", "`GET /console/receipt`", 1)
		require.NotEqual(t, string(doc), s, "the text to doctor")
		found, err := consoleDisagreements([]byte(s), consoleRoutes(t))
		require.NoError(t, err)
		require.ElementsMatch(t, []string{
			"route GET /console/receipt: in docs/API.md section 10, not served by the console's router",
			"route GET /console/receipts: served by the console's router, not in docs/API.md section 10",
		}, found)
	})
	t.Run("a row the parser cannot read", func(t *testing.T) {
		s := strings.Replace(string(doc), "| `POST /v1/refunds` | yes, key required | 201 Refund |",
			"| `POST /v1/refunds` | yes, key required | a Refund |", 1)
		_, err := contractDisagreements([]byte(s), api.OpenAPIDocument(), routes)
		require.ErrorContains(t, err, "no success status")
	})
}

// servedRoutes are the router's routes, as "METHOD /path".
func servedRoutes(t *testing.T) []string {
	t.Helper()
	handler := newHandler(t, api.Config{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	var served []string
	require.NoError(t, chi.Walk(handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served = append(served, method+" "+route)
		return nil
	}))
	return served
}

// consoleRoutes are the console's router's routes, as "METHOD /console/...".
func consoleRoutes(t *testing.T) []string {
	t.Helper()
	routes, err := console.Routes()
	require.NoError(t, err)
	return routes
}

// pathParam is a parameter of a route's path; the reference names some for
// people ({user email}), the router for code ({user}).
var pathParam = regexp.MustCompile(`\{[^}]*\}`)

// consoleDisagreements compares the console's sections of the reference
// with the console's router, both ways, a parameter being a parameter
// whatever its name.
func consoleDisagreements(doc []byte, served []string) ([]string, error) {
	ref, err := parseContractDoc(doc)
	if err != nil {
		return nil, err
	}
	shape := func(route string) string { return pathParam.ReplaceAllString(route, "{}") }
	var servedShapes []string
	for _, route := range served {
		servedShapes = append(servedShapes, shape(route))
	}
	var found []string
	for _, s := range consoleSections {
		documented := map[string]bool{}
		for route := range ref.routes[s] {
			documented[shape(route)] = true
		}
		for _, route := range slices.Sorted(maps.Keys(ref.routes[s])) {
			if !slices.Contains(servedShapes, shape(route)) {
				found = append(found, fmt.Sprintf("route %s: in docs/API.md section %d, not served by the console's router", route, s))
			}
		}
		for _, route := range served {
			if !documented[shape(route)] {
				found = append(found, fmt.Sprintf("route %s: served by the console's router, not in docs/API.md section %d", route, s))
			}
		}
	}
	slices.Sort(found)
	return found, nil
}

// contractDisagreements compares the reference (docs/API.md) with the OpenAPI
// document and the router's routes, and lists every disagreement, sorted.
func contractDisagreements(doc, openapi []byte, served []string) ([]string, error) {
	ref, err := parseContractDoc(doc)
	if err != nil {
		return nil, err
	}
	spec, err := parseOpenAPI(openapi)
	if err != nil {
		return nil, err
	}

	documented := map[string]int{} // route -> its success status, in the compared sections
	for _, s := range routeTableSections {
		for route, status := range ref.routes[s] {
			documented[route] = status
		}
	}
	var found []string
	for _, route := range slices.Sorted(maps.Keys(documented)) {
		success, described := spec.success[route]
		if !described {
			found = append(found, "route "+route+": in docs/API.md, not in the OpenAPI document")
		} else if !slices.Equal(success, []int{documented[route]}) {
			found = append(found, fmt.Sprintf("success of %s: docs/API.md says %d, the OpenAPI document %v", route, documented[route], success))
		}
		if !slices.Contains(served, route) {
			found = append(found, "route "+route+": in docs/API.md, not served by the router")
		}
	}
	for _, route := range slices.Sorted(maps.Keys(spec.success)) {
		if _, ok := documented[route]; !ok {
			found = append(found, "route "+route+": in the OpenAPI document, not in docs/API.md")
		}
	}
	for _, code := range ref.codes {
		if !slices.Contains(spec.codes, code) {
			found = append(found, "code "+code+": in docs/API.md, not in the OpenAPI document")
		}
	}
	for _, code := range spec.codes {
		if !slices.Contains(ref.codes, code) {
			found = append(found, "code "+code+": in the OpenAPI document, not in docs/API.md")
		}
	}
	slices.Sort(found)
	return found, nil
}

// contractDoc is what the check reads from docs/API.md.
type contractDoc struct {
	routes map[int]map[string]int // section -> "METHOD /path" -> success status (0 outside the compared sections)
	codes  []string               // the problem codes section 2 lists
}

var (
	sectionHeading = regexp.MustCompile(`^## (\d+)\. `)
	routeInCell    = regexp.MustCompile("`(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^`?]*)(\\?[^`]*)?`")
	leadingStatus  = regexp.MustCompile(`^([1-5]\d\d)\b`)
	codeName       = regexp.MustCompile(`^[a-z][a-z_]*$`)
)

// codesSentence opens the sentence of section 2 that lists every `code`.
const codesSentence = "`code` is stable and machine-readable:"

// parseContractDoc reads every `| route |` table (its first column's routes,
// and in the compared sections the success column's leading status) and the
// list of codes of section 2.
func parseContractDoc(doc []byte) (contractDoc, error) {
	ref := contractDoc{routes: map[int]map[string]int{}}
	lines := strings.Split(string(doc), "\n")
	section := 0
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := sectionHeading.FindStringSubmatch(line); m != nil {
			section, _ = strconv.Atoi(m[1])
			continue
		}
		if strings.HasPrefix(line, codesSentence) && section == 2 {
			var para []string
			for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
				para = append(para, lines[i])
			}
			codes, err := parseCodes(strings.Join(para, " "))
			if err != nil {
				return ref, err
			}
			ref.codes = codes
			continue
		}
		header := tableCells(line)
		if len(header) == 0 || header[0] != "route" {
			continue
		}
		successCol := slices.Index(header, "success")
		compared := slices.Contains(routeTableSections, section)
		if compared && successCol < 0 {
			return ref, fmt.Errorf("docs/API.md section %d: a route table without a success column", section)
		}
		if ref.routes[section] == nil {
			ref.routes[section] = map[string]int{}
		}
		for i += 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ { // past the header and |---|
			cells := tableCells(lines[i])
			ms := routeInCell.FindAllStringSubmatch(cells[0], -1)
			if len(ms) == 0 {
				return ref, fmt.Errorf("docs/API.md section %d: no route in the row %q", section, lines[i])
			}
			status := 0
			if compared {
				if successCol >= len(cells) {
					return ref, fmt.Errorf("docs/API.md section %d: the row %q has no success column", section, lines[i])
				}
				m := leadingStatus.FindStringSubmatch(cells[successCol])
				if m == nil {
					return ref, fmt.Errorf("docs/API.md section %d: no success status at the start of %q", section, cells[successCol])
				}
				status, _ = strconv.Atoi(m[1])
			}
			for _, m := range ms {
				route := m[1] + " " + m[2]
				if prev, ok := ref.routes[section][route]; ok && prev != status {
					return ref, fmt.Errorf("docs/API.md section %d: %s is listed with %d and %d", section, route, prev, status)
				}
				ref.routes[section][route] = status
			}
		}
		i-- // the line that ended the table is read again by the loop
	}
	if len(ref.codes) == 0 {
		return ref, fmt.Errorf("docs/API.md section 2: no sentence starting %q", codesSentence)
	}
	return ref, nil
}

// tableCells splits a Markdown table row into its trimmed cells (an escaped
// \| is part of a cell); nil when the line is not a row.
func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil
	}
	const pipe = "\x00"
	cells := strings.Split(strings.ReplaceAll(line[1:len(line)-1], `\|`, pipe), "|")
	for i, c := range cells {
		cells[i] = strings.TrimSpace(strings.ReplaceAll(c, pipe, "|"))
	}
	return cells
}

// parseCodes reads the codes from the sentence that lists them: every
// `code` outside parentheses, up to the full stop that ends the sentence.
// What parentheses hold (`decline_code`, `Retry-After`, ...) says more about a
// code and is not one.
func parseCodes(para string) ([]string, error) {
	rest := para[len(codesSentence):]
	var codes []string
	depth, inCode, start := 0, false, 0
	for i, r := range rest {
		switch {
		case r == '`':
			if inCode && depth == 0 {
				code := rest[start:i]
				if !codeName.MatchString(code) {
					return nil, fmt.Errorf("docs/API.md section 2: %q in the list of codes is not a code", code)
				}
				codes = append(codes, code)
			}
			inCode, start = !inCode, i+1
		case inCode:
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == '.' && depth == 0:
			return codes, nil
		}
	}
	return nil, fmt.Errorf("docs/API.md section 2: the list of codes has no end")
}

// openAPIFacts is what the check reads from the OpenAPI document.
type openAPIFacts struct {
	success map[string][]int // "METHOD /path" -> its 1xx to 3xx response statuses, sorted
	codes   []string         // the ErrorCode enum
}

func parseOpenAPI(spec []byte) (openAPIFacts, error) {
	var d struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas struct {
				ErrorCode struct {
					Enum []string `json:"enum"`
				} `json:"ErrorCode"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(spec, &d); err != nil {
		return openAPIFacts{}, err
	}
	facts := openAPIFacts{success: map[string][]int{}, codes: d.Components.Schemas.ErrorCode.Enum}
	if len(facts.codes) == 0 {
		return facts, fmt.Errorf("openapi.json: no enum in components.schemas.ErrorCode")
	}
	for path, item := range d.Paths {
		for method, raw := range item {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
			default: // parameters, summary, ...
				continue
			}
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				return facts, fmt.Errorf("openapi.json: %s %s: %w", method, path, err)
			}
			var success []int
			for status := range op.Responses {
				if n, err := strconv.Atoi(status); err == nil && n < 400 {
					success = append(success, n)
				}
			}
			slices.Sort(success)
			facts.success[strings.ToUpper(method)+" "+path] = success
		}
	}
	return facts, nil
}
