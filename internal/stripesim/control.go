package stripesim

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"
)

// The control surface, /_sim/..., lets tests and developers look inside the
// simulator and inject faults. Its answers are plain JSON, and its errors
// {"error": "..."}.

// loopbackOnly answers 403 to clients that are not on this machine.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			writeControlError(w, http.StatusForbidden, "the simulator's control surface answers loopback clients only")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Objects returns every object of a type (payment_intent, charge, refund,
// dispute, customer or event) in order of creation, as Stripe would encode it.
func (s *Simulator) Objects(typ string) ([]json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyDue()
	switch typ {
	case "payment_intent":
		return snapshots(s.state.paymentIntents.order), nil
	case "charge":
		return snapshots(s.state.charges.order), nil
	case "refund":
		return snapshots(s.state.refunds.order), nil
	case "customer":
		return snapshots(s.state.customers.order), nil
	case "dispute":
		return snapshots(s.state.disputes.order), nil
	case "event":
		events := make([]json.RawMessage, 0, len(s.state.events.order))
		for _, ev := range s.state.events.order {
			events = append(events, snapshot(ev))
		}
		return events, nil
	}
	return nil, fmt.Errorf("unknown object type %q (want payment_intent, charge, refund, dispute, customer or event)", typ)
}

func snapshots[T any](objects []*T) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(objects))
	for _, obj := range objects {
		out = append(out, snapshot(obj))
	}
	return out
}

// serveObjects is GET /_sim/objects?type=T.
func (s *Simulator) serveObjects(w http.ResponseWriter, r *http.Request) {
	objects, err := s.Objects(r.URL.Query().Get("type"))
	if err != nil {
		writeControlError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeControl(w, http.StatusOK, objects)
}

// serveRequests is GET /_sim/requests.
func (s *Simulator) serveRequests(w http.ResponseWriter, _ *http.Request) {
	writeControl(w, http.StatusOK, s.Requests())
}

// serveFaults is GET /_sim/faults.
func (s *Simulator) serveFaults(w http.ResponseWriter, _ *http.Request) {
	writeControl(w, http.StatusOK, s.Faults())
}

// serveAddFault is POST /_sim/faults; it answers the fault as armed.
func (s *Simulator) serveAddFault(w http.ResponseWriter, r *http.Request) {
	var f Fault
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		writeControlError(w, http.StatusBadRequest, "invalid fault: "+err.Error())
		return
	}
	if err := f.normalize(); err != nil {
		writeControlError(w, http.StatusBadRequest, "invalid fault: "+err.Error())
		return
	}
	s.arm(f)
	writeControl(w, http.StatusOK, f)
}

// serveClearFaults is DELETE /_sim/faults.
func (s *Simulator) serveClearFaults(w http.ResponseWriter, _ *http.Request) {
	s.ClearFaults()
	writeControl(w, http.StatusOK, map[string]bool{"cleared": true})
}

// serveReset is POST /_sim/reset.
func (s *Simulator) serveReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	writeControl(w, http.StatusOK, map[string]bool{"reset": true})
}

// serveAdvance is POST /_sim/advance {"seconds": N}: the clock moves N
// seconds forward (N may have a fraction) and what falls due meanwhile
// happens. It answers the new time, in Unix seconds.
func (s *Simulator) serveAdvance(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Seconds *float64 `json:"seconds"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeControlError(w, http.StatusBadRequest, "invalid advance: "+err.Error())
		return
	}
	// At most ten years, so that the duration cannot overflow.
	if req.Seconds == nil || !(*req.Seconds >= 0 && *req.Seconds <= 10*365*24*3600) {
		writeControlError(w, http.StatusBadRequest, `invalid advance: want {"seconds": N} with N from 0 to 315360000`)
		return
	}
	now := s.Advance(time.Duration(*req.Seconds * float64(time.Second)))
	writeControl(w, http.StatusOK, map[string]int64{"now": now.Unix()})
}

func serveControlNotFound(w http.ResponseWriter, r *http.Request) {
	writeControlError(w, http.StatusNotFound, fmt.Sprintf("no control route %s %s", r.Method, r.URL.Path))
}

func writeControl(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}

func writeControlError(w http.ResponseWriter, status int, msg string) {
	writeControl(w, status, map[string]string{"error": msg})
}
