package stripesim

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// listPaymentIntents is GET /v1/payment_intents: the payment intents,
// newest first, filtered by created (created=T, or created[gt], [gte],
// [lt], [lte]) and customer, and paged by limit (default 10, at most 100)
// and one cursor, starting_after (the page after an id, older) or
// ending_before (the page before it, newer), as Stripe's list endpoints
// are. Unlike search, a list shows a payment intent as soon as it is made
// (Stripe's lists read its primary store), so the service can prove a
// payment intent does not exist by it.
func (s *Simulator) listPaymentIntents(c *call) outcome {
	q, e := c.readListQuery("customer")
	if e != nil {
		return rejected(e)
	}
	created := q.created
	customer := c.str("customer")
	matches := func(pi *paymentIntent) bool {
		return created.contains(pi.Created) && (customer == "" || (pi.Customer != nil && *pi.Customer == customer))
	}

	all := s.state.paymentIntents.order // oldest first
	var older, newer []*paymentIntent   // what lies each side of the cursor
	switch cursor, param := q.cursor(); cursor {
	case "":
		older = all
	default:
		i := slices.IndexFunc(all, func(pi *paymentIntent) bool { return pi.ID == cursor })
		if i < 0 {
			return rejected(noSuchObject(http.StatusBadRequest, "payment_intent", param, cursor))
		}
		older, newer = all[:i], all[i+1:]
	}

	// The walk back stops under created's lower bound (PaymentIntents are
	// in order of creation), as GET /v1/events' does: a recovery listing
	// the minutes around its attempts reads those minutes, not the month.
	page, hasMore := listPage(older, newer, q.before, q.limit, matches,
		func(pi *paymentIntent) bool { return created.below(pi.Created) })
	return listAnswer(c, page, hasMore)
}

// createdRange is a filter on created, in Unix seconds; nil bounds are open.
type createdRange struct {
	gt, gte, lt, lte *int64
}

// below tells whether t is under the range's lower bound (created[gt] or
// [gte]): a list walking back in time from t on finds nothing more.
func (r createdRange) below(t int64) bool {
	return (r.gt != nil && t <= *r.gt) || (r.gte != nil && t < *r.gte)
}

func (r createdRange) contains(t int64) bool {
	return (r.gt == nil || t > *r.gt) && (r.gte == nil || t >= *r.gte) &&
		(r.lt == nil || t < *r.lt) && (r.lte == nil || t <= *r.lte)
}

// createdRange reads created=T (exactly T) or created[gt|gte|lt|lte]=T.
func (c *call) createdRange() (createdRange, *apiError) {
	var r createdRange
	for param, values := range c.form {
		if param != "created" && !strings.HasPrefix(param, "created[") {
			continue
		}
		v, err := strconv.ParseInt(values[0], 10, 64)
		if err != nil {
			return r, invalidRequest(http.StatusBadRequest, "parameter_invalid_integer", param, "Invalid integer: %s", values[0])
		}
		switch param {
		case "created":
			r.gte, r.lte = &v, &v
		case "created[gt]":
			r.gt = &v
		case "created[gte]":
			r.gte = &v
		case "created[lt]":
			r.lt = &v
		case "created[lte]":
			r.lte = &v
		default:
			return r, unknownParameter(param)
		}
	}
	return r, nil
}
