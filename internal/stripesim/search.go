package stripesim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// searchPaymentIntents is GET /v1/payment_intents/search. It supports the
// part of Stripe's search language a service needs to find its own payment
// intents: exact matches on metadata['key'], status, currency or customer,
// joined by AND, e.g.
//
//	metadata['order_id']:'42' AND status:'succeeded'
//
// Results are newest first, paged by limit (default 10, at most 100) and the
// opaque page token of the previous result's next_page.
func (s *Simulator) searchPaymentIntents(c *call) outcome {
	if e := c.allowOnly("query", "limit", "page", "expand"); e != nil {
		return rejected(e)
	}
	query := c.str("query")
	if query == "" {
		return rejected(missingParameter("query"))
	}
	clauses, err := parseSearchQuery(query)
	if err != nil {
		return rejected(invalidParameter("query", "Invalid search query %q: %v.", query, err))
	}
	limit, offset, e := c.searchPage()
	if e != nil {
		return rejected(e)
	}

	var matches []*paymentIntent
	all := s.state.paymentIntents.order
	for i := len(all) - 1; i >= 0; i-- {
		if matchesAll(all[i], clauses) {
			matches = append(matches, all[i])
		}
	}
	return succeeded(searchResult(c.path, matches, limit, offset))
}

// searchResult is Stripe's search_result object for one page of matches.
func searchResult(url string, matches []*paymentIntent, limit, offset int) any {
	page := matches[min(offset, len(matches)):min(offset+limit, len(matches))]
	hasMore := offset+limit < len(matches)
	var nextPage *string
	if hasMore {
		nextPage = nullable("page_" + strconv.Itoa(offset+limit))
	}
	return struct {
		Object   string           `json:"object"`
		Data     []*paymentIntent `json:"data"`
		HasMore  bool             `json:"has_more"`
		NextPage *string          `json:"next_page"`
		URL      string           `json:"url"`
	}{"search_result", append([]*paymentIntent{}, page...), hasMore, nextPage, url}
}

// searchPage reads limit and page.
func (c *call) searchPage() (limit, offset int, e *apiError) {
	limit = 10
	if raw := c.str("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 100 {
			return 0, 0, invalidParameter("limit", "limit must be an integer between 1 and 100.")
		}
		limit = n
	}
	if raw := c.str("page"); raw != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(raw, "page_"))
		if err != nil || n < 0 {
			return 0, 0, invalidParameter("page", "Invalid page token: %s.", raw)
		}
		offset = n
	}
	return limit, offset, nil
}

// searchClause is one field:'value' term of a query.
type searchClause struct {
	field       string // metadata, status, currency or customer
	metadataKey string
	value       string
}

func matchesAll(pi *paymentIntent, clauses []searchClause) bool {
	for _, cl := range clauses {
		if !cl.matches(pi) {
			return false
		}
	}
	return true
}

func (cl searchClause) matches(pi *paymentIntent) bool {
	switch cl.field {
	case "metadata":
		v, ok := pi.Metadata.get(cl.metadataKey)
		return ok && v == cl.value
	case "status":
		return pi.Status == cl.value
	case "currency":
		return pi.Currency == cl.value
	case "customer":
		return pi.Customer != nil && *pi.Customer == cl.value
	}
	return false
}

// parseSearchQuery parses clauses joined by AND.
func parseSearchQuery(query string) ([]searchClause, error) {
	var clauses []searchClause
	rest := strings.TrimSpace(query)
	for {
		clause, tail, err := parseSearchClause(rest)
		if err != nil {
			return nil, err
		}
		clauses = append(clauses, clause)
		tail = strings.TrimSpace(tail)
		if tail == "" {
			return clauses, nil
		}
		next, ok := strings.CutPrefix(tail, "AND ")
		if !ok {
			return nil, fmt.Errorf("expected AND before %q (the simulator supports only AND)", tail)
		}
		rest = strings.TrimSpace(next)
	}
}

// parseSearchClause parses metadata['key']:'value' or field:'value' at the
// start of s and returns the rest.
func parseSearchClause(s string) (searchClause, string, error) {
	cl, rest, err := parseSearchField(s)
	if err != nil {
		return cl, "", err
	}
	rest, ok := strings.CutPrefix(rest, ":")
	if !ok {
		return cl, "", errors.New("expected : (the simulator supports exact matches only)")
	}
	cl.value, rest, err = parseQuoted(rest)
	if err != nil {
		return cl, "", fmt.Errorf("value: %w", err)
	}
	return cl, rest, nil
}

func parseSearchField(s string) (searchClause, string, error) {
	if inner, ok := strings.CutPrefix(s, "metadata["); ok {
		key, rest, err := parseQuoted(inner)
		if err != nil {
			return searchClause{}, "", fmt.Errorf("metadata key: %w", err)
		}
		rest, ok := strings.CutPrefix(rest, "]")
		if !ok {
			return searchClause{}, "", errors.New("expected ] after the metadata key")
		}
		return searchClause{field: "metadata", metadataKey: key}, rest, nil
	}
	for _, field := range []string{"status", "currency", "customer"} {
		if rest, ok := strings.CutPrefix(s, field); ok {
			return searchClause{field: field}, rest, nil
		}
	}
	return searchClause{}, "", fmt.Errorf("unsupported field at %q", s)
}

// parseQuoted reads a '...' or "..." string, where a backslash escapes the
// next character, at the start of s.
func parseQuoted(s string) (value, rest string, err error) {
	if s == "" || (s[0] != '\'' && s[0] != '"') {
		return "", "", errors.New("expected a quoted string")
	}
	quote := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case ch == quote:
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(ch)
		}
	}
	return "", "", errors.New("unterminated string")
}
