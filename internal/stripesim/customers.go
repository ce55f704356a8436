package stripesim

import "net/http"

// createCustomer is POST /v1/customers.
func (s *Simulator) createCustomer(c *call) outcome {
	if e := c.allowOnly("email", "name", "description", "phone", "metadata", "expand"); e != nil {
		return rejected(e)
	}
	cus := &customer{
		ID:          newID("cus"),
		Object:      "customer",
		Created:     s.now().Unix(),
		Description: nullable(c.str("description")),
		Email:       nullable(c.str("email")),
		Metadata:    c.metadata(),
		Name:        nullable(c.str("name")),
	}
	s.state.customers.add(cus.ID, cus)
	s.emit(c, "customer.created", cus)
	return succeeded(cus)
}

// getCustomer is GET /v1/customers/{id}. GET /v1/customers/search is
// Stripe's customer search, which the simulator does not implement: like
// every route it lacks, it is an unrecognized URL, not a customer named
// "search".
func (s *Simulator) getCustomer(c *call) outcome {
	if c.id == "search" {
		return unrecognizedURL(c)
	}
	cus, ok := s.state.customers.get(c.id)
	if !ok {
		return rejected(noSuchObject(http.StatusNotFound, "customer", "id", c.id))
	}
	return succeeded(cus)
}
