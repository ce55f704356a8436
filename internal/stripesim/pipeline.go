package stripesim

import (
	"net/http"
	"time"
)

// operation is one Stripe endpoint. It runs with Simulator.mu held, so it
// must not block; it reads and changes s.state and reports what it decided.
type operation func(c *call) outcome

// outcome is an operation's decision: the response, and whether execution
// began. Only an outcome whose execution began is stored under the request's
// idempotency key; a request rejected before that leaves the key free.
type outcome struct {
	status   int
	body     []byte
	executed bool
}

// succeeded answers 200 with a snapshot of obj.
func succeeded(obj any) outcome {
	return outcome{status: http.StatusOK, body: snapshot(obj), executed: true}
}

// failed answers an error that execution produced (a decline, a state
// conflict): it is stored and replayed like a success.
func failed(e *apiError) outcome {
	return outcome{status: e.status, body: e.body(), executed: true}
}

// rejected answers an error found before executing (validation): it is not
// stored.
func rejected(e *apiError) outcome {
	return outcome{status: e.status, body: e.body()}
}

// response is what the client is sent, or would have been sent without a
// fault.
type response struct {
	status    int
	body      []byte
	requestID string // the request that produced it: an earlier one on a replay
	replayed  bool
}

func errorResponse(c *call, e *apiError) response {
	return response{status: e.status, body: e.body(), requestID: c.requestID}
}

func (s *Simulator) api(op operation) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serveAPI(w, r, op)
	})
}

// serveAPI is the life of every /v1 request; the package comment describes
// the steps and which results are stored.
func (s *Simulator) serveAPI(w http.ResponseWriter, r *http.Request, op operation) {
	c := newCall(r)
	w.Header().Set("Request-Id", c.requestID)
	if c.idempotencyKey != "" {
		w.Header().Set("Idempotency-Key", c.idempotencyKey)
	}
	if v := r.Header.Get("Stripe-Version"); v != "" {
		w.Header().Set("Stripe-Version", v)
	}

	rec := s.recordRequest(c)
	res, fault := s.handle(r, c, op)
	s.save() // what the answer says is in the state file before it goes out (Open)
	s.finishRecord(rec, res, fault)
	s.logger.Info("stripesim: request", "request_id", c.requestID, "method", c.method, "path", c.path,
		"idempotency_key", c.idempotencyKey, "status", res.status, "replayed", res.replayed, "fault", fault.Kind)
	s.send(w, res, fault)
}

// handle decides the response, and the fault that will garble it on the way
// out, if any.
func (s *Simulator) handle(r *http.Request, c *call, op operation) (response, Fault) {
	if e := c.parse(r); e != nil {
		return errorResponse(c, e), Fault{}
	}
	fault := s.takeFault(c)
	c.fault = fault
	if e := fault.errorBeforeExecuting(); e != nil {
		return errorResponse(c, e), fault
	}
	if c.idempotent() {
		if res, mayExecute := s.claimKey(c); !mayExecute {
			if res.replayed {
				s.sleep(fault.delay())
			}
			return res, fault
		}
	}
	if e := fault.storedError(); e != nil {
		return s.storeWithoutExecuting(c, e), fault
	}
	if fault.Kind == FaultLate500 {
		return s.storeAndExecuteLater(c, op, time.Duration(fault.DelayMS)*time.Millisecond), fault
	}
	if fault.Kind == FaultProcessing {
		// At least a millisecond: a processing fault always processes.
		c.processingFor = max(time.Duration(fault.DelayMS)*time.Millisecond, time.Millisecond)
	}
	s.sleep(fault.delay())
	return s.execute(c, op), fault
}

// execute runs op under the lock and settles the idempotency key it claimed.
func (s *Simulator) execute(c *call, op operation) response {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.applyDue() // what Stripe decided meanwhile is in place before the request reads it
	out := op(c)
	if c.method != http.MethodGet { // a GET reads; applyDue counts what it changed
		s.changed()
	}
	res := response{status: out.status, body: out.body, requestID: c.requestID}
	if c.claim != nil {
		s.state.settleKey(c, res, out.executed)
	}
	return res
}

// send writes res, unless a fault loses it.
func (s *Simulator) send(w http.ResponseWriter, res response, fault Fault) {
	switch fault.Kind {
	case FaultLostResponse:
		res = response{status: http.StatusInternalServerError, body: internalError().body()}
	case FaultDropConnection:
		dropConnection(w)
		return
	}
	if res.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Original-Request", res.requestID)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(res.status)
	_, _ = w.Write(res.body) // the client went away; nothing to do
}

// dropConnection closes the connection without an answer, as a network
// failure after the request reached Stripe would.
func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		// HTTP/2 cannot hijack; aborting the handler resets the stream.
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
