package stagedjobs_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/smtptest"
	"github.com/example/payments/internal/stagedjobs"
)

func startSMTP(t *testing.T, cfg smtptest.Config) *smtptest.Server {
	t.Helper()
	srv, err := smtptest.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	return srv
}

func smtpMailer(t *testing.T, srv *smtptest.Server) *stagedjobs.SMTPMailer {
	t.Helper()
	cfg, err := stagedjobs.ParseSMTPURL(srv.URL())
	require.NoError(t, err)
	cfg.TLSConfig = srv.ClientTLSConfig()
	return stagedjobs.NewSMTPMailer(cfg)
}

func TestParseSMTPURL(t *testing.T) {
	t.Parallel()
	cfg, err := stagedjobs.ParseSMTPURL("smtps://user:p%40ss@mail.example.com?from=shop@example.com")
	require.NoError(t, err)
	require.Equal(t, stagedjobs.SMTPConfig{Host: "mail.example.com", Port: 465, ImplicitTLS: true,
		Username: "user", Password: "p@ss", From: "shop@example.com"}, cfg)
	cfg, err = stagedjobs.ParseSMTPURL("smtp://mail.example.com:2525")
	require.NoError(t, err)
	require.Equal(t, stagedjobs.SMTPConfig{Host: "mail.example.com", Port: 2525, From: "receipts@mail.example.com"}, cfg)
	for _, bad := range []string{"http://mail.example.com", "smtp://", "smtp://host:99999", "mail.example.com:25"} {
		_, err := stagedjobs.ParseSMTPURL(bad)
		require.Error(t, err, bad)
	}
}

// Implicit TLS (smtps://) with credentials, and a subject and address that
// need RFC 2047: the server decodes what the library encoded.
func TestSMTPMailer_sendsOverImplicitTLSWithEncodedHeaders(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtptest.Config{ImplicitTLS: true, Username: "shop", Password: "secret", From: "reçus@example.com"})
	require.True(t, strings.HasPrefix(srv.URL(), "smtps://shop:secret@"))
	m := smtpMailer(t, srv)

	require.NoError(t, m.Send(context.Background(), stagedjobs.Message{
		To: "zoë@example.com", Subject: "Reçu — paiement pay_1 ✓", Body: "Merci.\n", MessageID: "receipt.payment.pay_1",
	}))
	got := srv.Accepted()
	require.Len(t, got, 1)
	require.Equal(t, "Reçu — paiement pay_1 ✓", got[0].Subject)
	require.NotContains(t, got[0].Header.Get("Subject"), "ç", "the raw header is encoded")
	require.Equal(t, "<receipt.payment.pay_1@example.com>", got[0].MessageID, "the From address's domain is added")
	require.Equal(t, []string{"zoë@example.com"}, got[0].To)
	require.Contains(t, got[0].Body, "Merci.")
}

func TestSMTPMailer_wrongCredentialsFail(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtptest.Config{ImplicitTLS: true, Username: "shop", Password: "secret"})
	cfg, err := stagedjobs.ParseSMTPURL(srv.URL())
	require.NoError(t, err)
	cfg.TLSConfig, cfg.Password = srv.ClientTLSConfig(), "wrong"
	err = stagedjobs.NewSMTPMailer(cfg).Send(context.Background(), stagedjobs.Message{To: "a@example.com", Subject: "s", Body: "b"})
	require.ErrorContains(t, err, "535")
	require.Empty(t, srv.Accepted())
}

// A server that hangs, wherever it hangs, holds a send no longer than its
// context allows.
func TestSMTPMailer_aHungServerEndsAtTheContextsDeadline(t *testing.T) {
	t.Parallel()
	for _, mode := range []smtptest.Mode{smtptest.HangOnConnect, smtptest.HangOnData} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: mode}})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			began := time.Now()
			err := smtpMailer(t, srv).Send(ctx, stagedjobs.Message{To: "a@example.com", Subject: "s", Body: "b"})
			require.Error(t, err)
			require.Less(t, time.Since(began), 2*time.Second, "ended by the deadline, not by a timeout of its own")
			require.Empty(t, srv.Accepted())
		})
	}
}

func TestSMTPMailer_aCancelledContextEndsTheSendAtOnce(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.HangOnConnect}})
	ctx, cancel := context.WithCancel(context.Background()) // no deadline at all
	done := make(chan error, 1)
	go func() {
		done <- smtpMailer(t, srv).Send(ctx, stagedjobs.Message{To: "a@example.com", Subject: "s", Body: "b"})
	}()
	require.Eventually(t, func() bool { return srv.OpenConnections() == 1 }, 5*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("the send went on after its context was cancelled")
	}
}

// The server accepted the message and then stopped answering (RSET,
// QUIT): the message is sent, and Send says so.
func TestSMTPMailer_aMessageTheServerAcceptedIsSentEvenIfTheGoodbyeHangs(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.HangAfterAccept}})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	require.NoError(t, smtpMailer(t, srv).Send(ctx, stagedjobs.Message{To: "a@example.com", Subject: "s", Body: "b"}))
	require.Len(t, srv.Accepted(), 1)
}

// receiptJob is a receipt job as River hands it to the worker.
func receiptJob(userID int64, payment string) *river.Job[stagedjobs.ReceiptArgs] {
	return &river.Job[stagedjobs.ReceiptArgs]{
		JobRow: &rivertype.JobRow{ID: 1, Kind: string(stagedjobs.ReceiptEmail), Attempt: 1},
		Args:   stagedjobs.ReceiptArgs{UserID: userID, Payment: payment, Amount: 2000, Currency: "usd", Reason: "payment"},
	}
}

func (b *testBundle) receiptSent(t *testing.T, payment string) bool {
	t.Helper()
	var sent bool
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT sent_at IS NOT NULL FROM receipts WHERE payment_id = $1", payment).Scan(&sent))
	return sent
}

// The job's context ends after the mail server accepted the receipt (here
// while the goodbye hangs): the receipt is recorded as sent all the same,
// and a second run of the job sends nothing.
func TestReceiptWorker_recordsAnAcceptedReceiptAfterTheJobsContextEnded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	userID := b.seedPayment(t, "pay_accepted")
	srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.HangAfterAccept}})
	w := stagedjobs.NewReceiptWorker(stagedjobs.WorkersConfig{Pool: b.pool, Mailer: smtpMailer(t, srv)})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Work(ctx, receiptJob(userID, "pay_accepted")) }()
	// Wait until the mailer has heard the 250 and moved on to its goodbye:
	// cancelling while it still waits for the 250 is the other case, a
	// send whose outcome is unknown (RFC 1047), which is not this test's.
	require.Eventually(t, func() bool { return srv.HungGoodbyes() == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Len(t, srv.Accepted(), 1)
	cancel() // as River's timeout or a hard stop would
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not end with its context")
	}
	require.True(t, b.receiptSent(t, "pay_accepted"), "recorded on a context of its own")

	srv.SetBehaviour(smtptest.Behaviour{Mode: smtptest.Accept})
	require.NoError(t, w.Work(context.Background(), receiptJob(userID, "pay_accepted")))
	require.Len(t, srv.Accepted(), 1, "not sent again")
	require.Equal(t, 1, srv.Connections())
}

// Two runs of one receipt at once (River rescuing a job it thought stuck,
// or the same receipt staged twice): one sends, the other waits and then
// finds it sent.
func TestReceiptWorker_twoRunsAtOnceSendOneCopy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	userID := b.seedPayment(t, "pay_twice")
	srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.Accept, Delay: 500 * time.Millisecond}})
	w := stagedjobs.NewReceiptWorker(stagedjobs.WorkersConfig{Pool: b.pool, Mailer: smtpMailer(t, srv)})

	first := make(chan error, 1)
	go func() { first <- w.Work(context.Background(), receiptJob(userID, "pay_twice")) }()
	require.Eventually(t, func() bool { return srv.Connections() == 1 }, 5*time.Second, 10*time.Millisecond)

	err := w.Work(context.Background(), receiptJob(userID, "pay_twice"))
	var snooze *river.JobSnoozeError
	require.ErrorAs(t, err, &snooze, "the second run waits for the first")
	require.NoError(t, <-first)
	require.NoError(t, w.Work(context.Background(), receiptJob(userID, "pay_twice")), "the snoozed run, later")
	require.Len(t, srv.Accepted(), 1)
	require.Equal(t, 1, srv.Connections())
	require.True(t, b.receiptSent(t, "pay_twice"))
}

// A refused send gives its reservation back: the retry sends at once, and
// a receipt the library cannot address is not retried at all.
func TestReceiptWorker_aRefusedSendIsRetriedAndAnUnsendableOneIsNot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	userID := b.seedPayment(t, "pay_refused")
	srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.Fail, FailTimes: 1}})
	w := stagedjobs.NewReceiptWorker(stagedjobs.WorkersConfig{Pool: b.pool, Mailer: smtpMailer(t, srv),
		Logger: slog.New(slog.DiscardHandler)})

	err := w.Work(context.Background(), receiptJob(userID, "pay_refused"))
	require.ErrorContains(t, err, "451")
	var cancelled *river.JobCancelError
	require.False(t, errors.As(err, &cancelled), "a 451 is worth a retry")
	require.NoError(t, w.Work(context.Background(), receiptJob(userID, "pay_refused")))
	require.Len(t, srv.Accepted(), 1)
	require.True(t, b.receiptSent(t, "pay_refused"))

	_, err = b.pool.Exec(context.Background(), "UPDATE users SET email = 'not an address' WHERE id = $1", userID)
	require.NoError(t, err)
	_, err = b.pool.Exec(context.Background(), `INSERT INTO payments (id, user_id, amount, currency, status, amount_captured, payment_method)
		VALUES ('pay_unsendable', $1, 2000, 'usd', 'succeeded', 2000, 'pm_card_visa')`, userID)
	require.NoError(t, err)
	err = w.Work(context.Background(), receiptJob(userID, "pay_unsendable"))
	require.ErrorAs(t, err, &cancelled)
	require.ErrorIs(t, err, stagedjobs.ErrBadMessage)
	require.Len(t, srv.Accepted(), 1)
}

// A receipt writes its amount with its currency's decimals (ISO 4217's
// minor-unit exponent, as Stripe counts amounts): ¥5000 is "5000 JPY", not
// "50.00 JPY".
func TestReceiptWorker_writesTheAmountWithTheCurrencysDecimals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := startSMTP(t, smtptest.Config{})
	w := stagedjobs.NewReceiptWorker(stagedjobs.WorkersConfig{Pool: b.pool, Mailer: smtpMailer(t, srv)})
	for _, tc := range []struct {
		currency string
		amount   int64
		want     string
	}{
		{"jpy", 5000, "Payment of 5000 JPY for payment pay_jpy."}, // zero-decimal
		{"krw", 15000, "Payment of 15000 KRW for payment pay_krw."},
		{"usd", 2050, "Payment of 20.50 USD for payment pay_usd."}, // two decimals
		{"kwd", 1500, "Payment of 1.500 KWD for payment pay_kwd."}, // three decimals
	} {
		payment := "pay_" + tc.currency
		job := receiptJob(b.seedPayment(t, payment), payment)
		job.Args.Amount, job.Args.Currency = tc.amount, tc.currency
		require.NoError(t, w.Work(context.Background(), job))
		got := srv.Accepted()
		require.Contains(t, got[len(got)-1].Body, tc.want)
	}
}
