package main

import (
	"bufio"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// scaleRows generates the preload's rows in Go, the same rows as the
// INSERT ... SELECT of buildScaleDB (-scale-load insert), for COPY.
type scaleRows struct {
	size        int
	t0          time.Time
	spacing     time.Duration
	fingerprint []byte
	users       []benchUser // in id order: request i belongs to users[i % len]
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func uuidOf(h string) string {
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func (r scaleRows) keyID(i int) string     { return uuidOf(md5Hex("k" + strconv.Itoa(i))) }
func (r scaleRows) paymentID(i int) string { return "pay_" + md5Hex("p" + strconv.Itoa(i))[:24] }
func (r scaleRows) intentID(i int) string  { return "pi_" + md5Hex("i" + strconv.Itoa(i))[:24] }
func (r scaleRows) finished(i int) time.Time {
	return r.t0.Add(time.Duration(i) * r.spacing)
}

// pgTime is a timestamptz in COPY's text form.
func pgTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.999999") + "+00" }

// copyScaleRows fills the three tables at once, each on a connection of its
// own, with COPY ... FREEZE after a TRUNCATE in the same transaction: the
// rows go in frozen and their pages all-visible, so no VACUUM has to visit
// them again and no cell pays for hint bits. The generators write COPY's
// text form by hand: at ten million rows, fmt and hex encoding would take a
// core of their own.
func (b *bench) copyScaleRows(ctx context.Context, dbname string, r scaleRows) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	// The fingerprint as COPY text: a bytea in hex, its backslash escaped.
	fp := `\\x` + hex.EncodeToString(r.fingerprint)
	tables := []struct {
		table, columns string
		rows           func(w *bufio.Writer, i int, x *scaleRow)
	}{
		{"idempotency_keys", "id, user_id, idempotency_key, flow, request_method, request_path, request_params, request_fingerprint, " +
			"recovery_point, lock_token, last_run_at, response_code, response_body, created_at, expires_at",
			func(w *bufio.Writer, i int, x *scaleRow) {
				// The stored answer: printable ASCII without a backslash is
				// its own bytea text (escape format), byte for byte.
				body := `{"id":"` + x.paymentID + `","object":"payment","amount":2000,"currency":"usd","status":"succeeded","captured":true,` +
					`"amount_captured":2000,"amount_refunded":0,"payment_method":"pm_card_visa","stripe_payment_intent":"` + x.intentID +
					`","failure_code":null,"failure_message":null,"description":null,"metadata":{},"created":` +
					strconv.FormatInt(x.finished.Unix(), 10) + `}`
				line(w, x.keyID, x.user, scaleKey(i), "create_payment\tPOST\t/v1/payments", createBody, fp, "finished\t1", x.at, "201",
					body, x.claimed, x.expires)
			}},
		{"payments", "id, user_id, amount, currency, status, capture, amount_captured, payment_method, stripe_payment_intent, " +
			"metadata, idempotency_key_id, created_at, updated_at",
			func(w *bufio.Writer, i int, x *scaleRow) {
				line(w, x.paymentID, x.user, "2000\tusd\tsucceeded\tt\t2000\tpm_card_visa", x.intentID, "{}", x.keyID, x.created, x.at)
			}},
		{"audit_records", "user_id, action, resource_type, resource_id, data, idempotency_key_id, created_at",
			func(w *bufio.Writer, i int, x *scaleRow) {
				line(w, x.user, "payment.created\tpayment", x.paymentID, `{"amount":2000}`, x.keyID, x.created)
				line(w, x.user, "payment.succeeded\tpayment", x.paymentID, `{"amount":2000}`, x.keyID, x.at)
			}},
	}
	for _, t := range tables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row := func(w *bufio.Writer, i int) {
				var x scaleRow
				r.fill(&x, i)
				t.rows(w, i, &x)
			}
			if err := copyTable(ctx, b.server.URL(dbname), t.table, t.columns, r.size, row); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// scaleRow is request i's values, as COPY text.
type scaleRow struct {
	keyID, paymentID, intentID, user string
	claimed, created, at, expires    string // timestamps: claimed, payment created, finished, expires
	finished                         time.Time
}

func (r scaleRows) fill(x *scaleRow, i int) {
	x.keyID, x.paymentID, x.intentID = r.keyID(i), r.paymentID(i), r.intentID(i)
	x.user = strconv.FormatInt(r.users[i%len(r.users)].id, 10)
	x.finished = r.finished(i)
	x.claimed = pgTime(x.finished.Add(-200 * time.Millisecond))
	x.created = pgTime(x.finished.Add(-150 * time.Millisecond))
	x.at = pgTime(x.finished)
	x.expires = pgTime(x.finished.Add(scaleTTL))
}

// line writes one row of COPY text: the fields, tab-separated.
func line(w *bufio.Writer, fields ...string) {
	for i, f := range fields {
		if i > 0 {
			w.WriteByte('\t')
		}
		w.WriteString(f)
	}
	w.WriteByte('\n')
}

// copyTable copies rows 1..n, as row writes them, into table.
func copyTable(ctx context.Context, url, table, columns string, n int, row func(w *bufio.Writer, i int)) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	pr, pw := io.Pipe()
	defer pr.Close() // stops the writer should COPY fail
	go func() {
		w := bufio.NewWriterSize(pw, 1<<20)
		for i := 1; i <= n; i++ {
			row(w, i)
		}
		pw.CloseWithError(w.Flush())
	}()
	if _, err := conn.Exec(ctx, "BEGIN; TRUNCATE "+table); err != nil {
		return err
	}
	if _, err := conn.PgConn().CopyFrom(ctx, pr, "COPY "+table+" ("+columns+") FROM STDIN WITH (FREEZE)"); err != nil {
		return fmt.Errorf("copying %s: %w", table, err)
	}
	_, err = conn.Exec(ctx, "COMMIT")
	return err
}
