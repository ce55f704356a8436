package stripesim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"time"
)

// A simulator made by Open keeps its state in a file too, so that a
// restarted `payments dev` still knows the payment intents, charges,
// refunds, events and idempotency keys of its earlier runs, as Stripe would.
//
// When: after every request that changed the state, before its answer goes
// out (and after a later change the timer applied, a reset and an advance),
// the whole state is written to a temporary file and renamed over the state
// file. A rename is atomic, so the file always holds one whole state; and
// what a client was answered is in the file before the answer, so a SIGKILL
// right after an answer loses nothing the service may have recorded (the
// kernel writes the file out after the process is gone). Not synced: a
// power cut may lose the last changes, which is not worth an fsync on every
// request of a developer's simulator. Requests that finish together share
// one write (the later ones find their change written already). Writing
// the whole state costs time in its size (each event is encoded once;
// payment intents, charges and refunds at every write): fine for a
// developer's simulator, and the simulator of the benchmarks and the chaos
// suite, made by New, writes nothing.
//
// What: stateFields says, next to the state struct, how each field of state
// is kept; TestStateFile_coversEveryFieldOfState fails for a field added to
// state that stateFields neither keeps nor lists in forgottenOnRestart.

// stateFileVersion is the state file's format; a file of another version is
// an error, not a silent loss.
const stateFileVersion = 1

// stateFile is what the file holds.
type stateFile struct {
	Version int `json:"version"`
	// ClockOffset is what Advance added to the clock, in nanoseconds.
	ClockOffset int64                      `json:"clock_offset_ns"`
	State       map[string]json.RawMessage `json:"state"`
}

// fieldCodec keeps one field (or a few that go together) of state.
type fieldCodec interface {
	encode() (json.RawMessage, error)
	decode(json.RawMessage) error
}

// stateField is one entry of the state file: the fields of state it covers
// (pointers into the state) and how it is encoded.
type stateField struct {
	name   string
	covers []any
	codec  fieldCodec
}

// stateFields lists how every kept field of st is encoded. A table is one
// line; anything else needs a codec. keepEncodings keeps each event's
// encoding in the event, for the next saves (event.keepEncoding).
func stateFields(st *state, keepEncodings bool) []stateField {
	return []stateField{
		{"customers", []any{&st.customers}, &st.customers},
		{"payment_intents", []any{&st.paymentIntents}, &st.paymentIntents},
		{"charges", []any{&st.charges}, chargesCodec{&st.charges}},
		{"refunds", []any{&st.refunds}, &st.refunds},
		{"disputes", []any{&st.disputes}, &st.disputes},
		{"events", []any{&st.events}, eventsCodec{&st.events, keepEncodings}},
		{"idempotency_keys", []any{&st.keys, &st.keyOrder}, keysCodec{st}},
	}
}

// forgottenOnRestart are the fields of state the file does not keep, and why.
var forgottenOnRestart = map[string]string{
	"later": "a closure cannot be written down: rescheduleLater makes the changes still to come again from the " +
		"objects (authorisations to expire, refunds to settle or fail); a FaultLate500's late execution is forgotten",
	"lateRequests": "counts the late_500 executions still to come, which are forgotten with later",
	"faults":       "faults are a test's set-up for the run it is in",
	"requests":     "the request log is a test's record of the run it is in",
}

// Open returns a simulator that loads its state from path, when the file
// exists, and writes it there after every change. Call Close when done.
func Open(cfg Config, path string) (*Simulator, error) {
	s := New(cfg)
	s.store = &stateStore{path: path}
	// A temporary file of a write that a crash interrupted is not the state.
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp"))
	for _, f := range stale {
		_ = os.Remove(f)
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err == nil {
		err = s.restore(data)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("loading the Stripe simulator's state from %s: %w (move it away to start afresh)", path, err)
	}
	s.logger.Info("stripesim: state loaded", "file", path, "payment_intents", len(s.state.paymentIntents.order),
		"refunds", len(s.state.refunds.order), "idempotency_keys", len(s.state.keys))
	return s, nil
}

// stateStore is where a simulator made by Open writes its state.
type stateStore struct {
	path    string
	mu      sync.Mutex // serialises writes; taken before Simulator.mu, never after
	written uint64     // the generation (Simulator.gen) the file holds
}

// changed counts a change of the state. It runs with s.mu held.
func (s *Simulator) changed() { s.gen++ }

// save writes the state if it changed since the file was last written, and
// returns once the file holds every change made before the call.
func (s *Simulator) save() {
	if s.store == nil {
		return
	}
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()

	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	if s.store.written >= gen {
		return // a save that began after our change wrote it
	}
	s.mu.Lock()
	gen = s.gen
	data, err := s.encodeState()
	s.mu.Unlock()
	if err == nil {
		err = writeFileAtomically(s.store.path, data)
	}
	if err != nil {
		s.logger.Error("stripesim: cannot write the state file; a restart would lose the changes since the last write",
			"file", s.store.path, "error", err.Error())
		return
	}
	s.store.written = gen
}

// encodeState encodes the state as a stateFile. It runs with s.mu held,
// and with s.store.mu.
//
// By hand, not by json.Marshal of a stateFile: that would scan every
// json.RawMessage again to validate it, which took most of a save's time
// (measured with 2,000 payment intents: 250 ms a save, all of it
// encoding, before the events were encoded once each and this was by hand).
func (s *Simulator) encodeState() ([]byte, error) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, `{"version":%d,"clock_offset_ns":%d,"state":{`, stateFileVersion, s.offset.Load())
	for i, field := range stateFields(s.state, true) {
		b, err := field.codec.encode()
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", field.name, err)
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, "%q:", field.name) // names are plain identifiers
		buf.Write(b)
	}
	buf.WriteString("}}")
	return buf.Bytes(), nil
}

// restore replaces the state with the one data holds and schedules the
// changes still to come.
func (s *Simulator) restore(data []byte) error {
	var f stateFile
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	if f.Version != stateFileVersion {
		return fmt.Errorf("the file is of version %d; this simulator reads version %d", f.Version, stateFileVersion)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := newState()
	for _, field := range stateFields(st, false) {
		b, ok := f.State[field.name]
		if !ok {
			continue // a field the file's writer did not have: empty
		}
		if err := field.codec.decode(b); err != nil {
			return fmt.Errorf("decoding %s: %w", field.name, err)
		}
	}
	s.state = st
	s.offset.Store(f.ClockOffset)
	s.rescheduleLater()
	return nil
}

// rescheduleLater makes again the later changes of the restored objects
// (see the callers of later). It runs with s.mu held; what fell due while
// the simulator was down happens at its next request or timer.
func (s *Simulator) rescheduleLater() {
	now := s.now()
	at := func(unix int64, d time.Duration) time.Duration { return time.Unix(unix, 0).Add(d).Sub(now) }
	for _, pi := range s.state.paymentIntents.order {
		if pi.Status != statusRequiresCapture || pi.LatestCharge == nil {
			continue
		}
		if ch, ok := s.state.charges.get(*pi.LatestCharge); ok {
			s.later(at(ch.Created, s.authorisationLifetime), func() { s.expireAuthorisation(pi) })
		}
	}
	for _, pi := range s.state.paymentIntents.order {
		if pi.Status != statusProcessing || pi.LatestCharge == nil {
			continue
		}
		// The processing fault's delay is not kept: the charge goes
		// through at once.
		if ch, ok := s.state.charges.get(*pi.LatestCharge); ok {
			s.later(0, func() {
				if pi.Status == statusProcessing {
					s.approve(nil, pi, ch)
				}
			})
		}
	}
	for _, ch := range s.state.charges.order {
		if testCards[ch.PaymentMethod].disputed && ch.Captured && !ch.Disputed {
			s.later(at(ch.Created, laterDelay), func() { s.openDispute(ch) })
		}
	}
	for _, re := range s.state.refunds.order {
		ch, ok := s.state.charges.get(re.Charge)
		if !ok {
			continue
		}
		switch card := testCards[ch.PaymentMethod]; {
		case card.refunds == refundPendsThenSucceeds && re.Status == refundPending:
			s.later(at(re.Created, laterDelay), func() { s.settleRefund(re) })
		case card.refunds == refundFailsLater && re.Status == refundSucceeded:
			s.later(at(re.Created, laterDelay), func() { s.failRefund(re, ch, "expired_or_canceled_card") })
		}
	}
}

// encode writes a table as its objects in order of creation.
func (t *table[T]) encode() (json.RawMessage, error) {
	return json.Marshal(t.order)
}

// decode reads what encode wrote; each object's id is its ID field.
func (t *table[T]) decode(data json.RawMessage) error {
	var objects []*T
	if err := json.Unmarshal(data, &objects); err != nil {
		return err
	}
	*t = table[T]{}
	for _, obj := range objects {
		id := reflect.ValueOf(obj).Elem().FieldByName("ID")
		if !id.IsValid() || id.Kind() != reflect.String || id.String() == "" {
			return fmt.Errorf("an object of type %T without an id", obj)
		}
		t.add(id.String(), obj)
	}
	return nil
}

// eventsCodec encodes each event once: an event never changes after it is
// emitted (emit), and the events are most of the state's bytes. With keep,
// the encoding stays in the event (event.raw), which holds its object's
// JSON inside it: one copy, not two.
type eventsCodec struct {
	t    *table[event]
	keep bool // false: encode every event
}

func (c eventsCodec) encode() (json.RawMessage, error) {
	if !c.keep {
		return c.t.encode()
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, ev := range c.t.order {
		if ev.raw == nil { // loaded from the file, or made before Open's store was set
			ev.keepEncoding()
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(ev.raw)
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// decode reads what encode wrote. An event's made (to the nanosecond,
// for GET /v1/events) is not in its JSON: it comes back as its created,
// the second it was made in, which lists it under events_lag at most a
// second early.
func (c eventsCodec) decode(data json.RawMessage) error {
	if err := c.t.decode(data); err != nil {
		return err
	}
	for _, ev := range c.t.order {
		ev.made = time.Unix(ev.Created, 0)
	}
	return nil
}

// chargesCodec keeps what a charge's JSON leaves out: released.
type chargesCodec struct{ t *table[charge] }

type chargeInFile struct {
	charge
	Released int64 `json:"released_uncaptured"`
}

func (c chargesCodec) encode() (json.RawMessage, error) {
	out := make([]chargeInFile, 0, len(c.t.order))
	for _, ch := range c.t.order {
		out = append(out, chargeInFile{charge: *ch, Released: ch.released})
	}
	return json.Marshal(out)
}

func (c chargesCodec) decode(data json.RawMessage) error {
	var in []chargeInFile
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*c.t = table[charge]{}
	for _, f := range in {
		ch := f.charge
		ch.released = f.Released
		c.t.add(ch.ID, &ch)
	}
	return nil
}

// keysCodec keeps the idempotency keys whose first request finished, in
// the order they were claimed. A key still held by a running request is
// not kept: that request ends with the process, and a retry executes anew,
// as after a request Stripe never received.
type keysCodec struct{ st *state }

type keyInFile struct {
	APIKey    string     `json:"api_key"`
	Key       string     `json:"key"`
	Method    string     `json:"method"`
	Path      string     `json:"path"`
	Params    url.Values `json:"params"`
	Created   time.Time  `json:"created"`
	Status    int        `json:"status"`
	Body      string     `json:"body"`
	RequestID string     `json:"request_id"`
}

func (c keysCodec) encode() (json.RawMessage, error) {
	out := []keyInFile{}
	for _, k := range c.st.keyOrder {
		e := k.entry
		if c.st.keys[k.scope] != e || e.result == nil {
			continue
		}
		out = append(out, keyInFile{APIKey: k.scope.apiKey, Key: k.scope.key, Method: e.request.method, Path: e.request.path,
			Params: e.request.params, Created: e.created, Status: e.result.status, Body: string(e.result.body),
			RequestID: e.result.requestID})
	}
	return json.Marshal(out)
}

func (c keysCodec) decode(data json.RawMessage) error {
	var in []keyInFile
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	c.st.keys = make(map[keyScope]*keyEntry, len(in))
	c.st.keyOrder = nil
	for _, k := range in {
		scope := keyScope{apiKey: k.APIKey, key: k.Key}
		e := &keyEntry{
			request: fingerprint{method: k.Method, path: k.Path, params: k.Params},
			created: k.Created,
			result:  &response{status: k.Status, body: []byte(k.Body), requestID: k.RequestID},
		}
		c.st.keys[scope] = e
		c.st.keyOrder = append(c.st.keyOrder, claimedKey{scope, e})
	}
	return nil
}

// writeFileAtomically replaces path with data: a temporary file in the
// same directory, renamed over path, so that whoever reads path, after a
// crash of this process too, reads the old content or the new, whole.
func writeFileAtomically(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
