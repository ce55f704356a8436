package stripesim

// RequestRecord is one /v1 request the simulator received, as listed by
// GET /_sim/requests.
type RequestRecord struct {
	RequestID      string    `json:"request_id"`
	Method         string    `json:"method"`
	Path           string    `json:"path"`
	IdempotencyKey string    `json:"idempotency_key"`
	Status         int       `json:"status"` // what the client saw: 0 while running or when the connection was dropped
	Replayed       bool      `json:"replayed"`
	Fault          FaultKind `json:"fault,omitempty"` // the fault that hit it, if any
}

// Requests returns the /v1 requests received since the last Reset, in order
// of arrival.
func (s *Simulator) Requests() []RequestRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	records := make([]RequestRecord, 0, len(s.state.requests))
	for _, r := range s.state.requests {
		records = append(records, *r)
	}
	return records
}

// recordRequest appends c to the request log on arrival, so the log keeps
// arrival order even when requests finish out of order.
func (s *Simulator) recordRequest(c *call) *RequestRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := &RequestRecord{
		RequestID:      c.requestID,
		Method:         c.method,
		Path:           c.path,
		IdempotencyKey: c.idempotencyKey,
	}
	s.state.requests = append(s.state.requests, rec)
	return rec
}

// finishRecord fills in how the request ended.
func (s *Simulator) finishRecord(rec *RequestRecord, res response, fault Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec.Status = res.status
	rec.Replayed = res.replayed
	rec.Fault = fault.Kind
	switch fault.Kind {
	case FaultLostResponse:
		rec.Status = 500
	case FaultDropConnection:
		rec.Status = 0
	}
}
