package stripesim

import "net/http"

// listRefunds is GET /v1/refunds: the refunds of one payment intent or
// charge (or all), newest first, paged by limit (default 10, at most 100)
// and starting_after, as Stripe's list endpoints are. Unlike search, a list
// shows a refund as soon as it is made, so the service can reconcile a
// refund by it without waiting for an index.
func (s *Simulator) listRefunds(c *call) outcome {
	if e := c.allowOnly("payment_intent", "charge", "limit", "starting_after", "expand"); e != nil {
		return rejected(e)
	}
	limit, _, e := c.searchPage()
	if e != nil {
		return rejected(e)
	}
	piID, chargeID, after := c.str("payment_intent"), c.str("charge"), c.str("starting_after")

	var page []*refund
	hasMore, started := false, after == ""
	all := s.state.refunds.order
	for i := len(all) - 1; i >= 0; i-- {
		re := all[i]
		if !started {
			started = re.ID == after
			continue
		}
		if (piID != "" && re.PaymentIntent != piID) || (chargeID != "" && re.Charge != chargeID) {
			continue
		}
		if len(page) == limit {
			hasMore = true
			break
		}
		page = append(page, re)
	}
	if !started {
		return rejected(noSuchObject(http.StatusBadRequest, "refund", "starting_after", after))
	}
	return succeeded(struct {
		Object  string    `json:"object"`
		Data    []*refund `json:"data"`
		HasMore bool      `json:"has_more"`
		URL     string    `json:"url"`
	}{"list", append([]*refund{}, page...), hasMore, c.path})
}
