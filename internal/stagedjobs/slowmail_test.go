package stagedjobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/smtptest"
	"github.com/example/payments/internal/stagedjobs"
)

// timeScale shrinks time in the tests of a slow mail server: RFC 5321's
// timeouts (10 minutes for the answer to the end of DATA) and the servers'
// delays (35 s, 2 min, 9 min) are all divided by it, so that a test of "a
// server that answers after 9 minutes gets one receipt" takes 5.4 s instead
// of 9 minutes. What the tests show holds at full scale because nothing in
// the mailer or the worker waits for a fixed time: every wait is one of
// these timeouts, or the server's delay. (The margin shrinks with them: 9
// of 10 minutes leaves 0.6 s here, ample for a local connection.)
const timeScale = 100

// scaledTimeouts are RFC 5321's (SMTPTimeouts' defaults), divided by
// timeScale.
func scaledTimeouts() stagedjobs.SMTPTimeouts {
	return stagedjobs.SMTPTimeouts{
		Command:         stagedjobs.DefaultSMTPCommandTimeout / timeScale,
		DataInit:        stagedjobs.DefaultSMTPDataInitTimeout / timeScale,
		DataBlock:       stagedjobs.DefaultSMTPDataBlockTimeout / timeScale,
		DataTermination: stagedjobs.DefaultSMTPDataTerminationTimeout / timeScale,
	}
}

func mailerWith(t *testing.T, srv *smtptest.Server, timeouts stagedjobs.SMTPTimeouts) *stagedjobs.SMTPMailer {
	t.Helper()
	cfg, err := stagedjobs.ParseSMTPURL(srv.URL())
	require.NoError(t, err)
	cfg.TLSConfig, cfg.Timeouts = srv.ClientTLSConfig(), timeouts
	return stagedjobs.NewSMTPMailer(cfg)
}

// A mail server that answers the end of DATA after 35 s, 2 min or 9 min
// (scaled, see timeScale) is within RFC 5321's 10 minutes (section
// 4.5.3.2.6): it gets the receipt once. The send used to give up after
// 20 s, and the retry sent the receipt the server had accepted meanwhile
// a second time.
func TestReceiptWorker_aSlowMailServerWithinTheRFCsTimeoutGetsOneReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, delay := range []time.Duration{35 * time.Second, 2 * time.Minute, 9 * time.Minute} {
		t.Run(delay.String(), func(t *testing.T) {
			t.Parallel()
			payment := fmt.Sprintf("pay_slow_%d", int(delay.Seconds()))
			userID := b.seedPayment(t, payment)
			srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.Accept, Delay: delay / timeScale}})
			w := stagedjobs.NewReceiptWorker(stagedjobs.WorkersConfig{Pool: b.pool, Mailer: mailerWith(t, srv, scaledTimeouts())})

			began := time.Now()
			require.NoError(t, w.Work(context.Background(), receiptJob(userID, payment)))
			require.GreaterOrEqual(t, time.Since(began), delay/timeScale, "it waited for the server's answer")
			require.True(t, b.receiptSent(t, payment))
			require.NoError(t, w.Work(context.Background(), receiptJob(userID, payment)), "the job run again")
			require.Len(t, srv.Accepted(), 1)
			require.Empty(t, srv.Duplicates())
			require.Equal(t, 1, srv.Connections(), "no second attempt")
		})
	}
}

// The limit, shown so that the count above can fail: a server slower than
// the DATA timeout has the send give up, and the retry sends a second copy
// (with the same Message-ID) if the server accepted the first after the
// client left. RFC 5321 gives the client no way to know.
func TestReceiptWorker_aServerSlowerThanTheDataTimeoutGetsASecondCopy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	userID := b.seedPayment(t, "pay_too_slow")
	srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.Accept, Delay: 400 * time.Millisecond}})
	timeouts := scaledTimeouts()
	timeouts.DataTermination = 200 * time.Millisecond
	w := stagedjobs.NewReceiptWorker(stagedjobs.WorkersConfig{Pool: b.pool, Mailer: mailerWith(t, srv, timeouts)})

	require.ErrorContains(t, w.Work(context.Background(), receiptJob(userID, "pay_too_slow")), "end of DATA")
	require.Eventually(t, func() bool { return len(srv.Accepted()) == 1 }, 5*time.Second, 10*time.Millisecond,
		"the server accepted it after the client left")
	require.False(t, b.receiptSent(t, "pay_too_slow"))
	require.Error(t, w.Work(context.Background(), receiptJob(userID, "pay_too_slow")))
	require.Eventually(t, func() bool { return len(srv.Accepted()) == 2 }, 5*time.Second, 10*time.Millisecond)
	require.Len(t, srv.Duplicates(), 1, "two copies of one receipt")
}

// Each step has its own timeout, with no deadline on the context: a server
// that never greets is left after Command, one that never answers the end
// of DATA after DataTermination, which is longer than Command.
func TestSMTPMailer_eachStepEndsAtItsOwnTimeout(t *testing.T) {
	t.Parallel()
	timeouts := stagedjobs.SMTPTimeouts{Command: 200 * time.Millisecond, DataInit: 200 * time.Millisecond,
		DataBlock: 200 * time.Millisecond, DataTermination: time.Second}
	for _, tc := range []struct {
		mode          smtptest.Mode
		atLeast, upTo time.Duration
	}{
		{smtptest.HangOnConnect, 200 * time.Millisecond, 900 * time.Millisecond},
		{smtptest.HangOnData, time.Second, 3 * time.Second},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: tc.mode}})
			m := mailerWith(t, srv, timeouts)
			require.Equal(t, 4*200*time.Millisecond+2*200*time.Millisecond+time.Second, m.MaxSendTime())
			began := time.Now()
			err := m.Send(context.Background(), stagedjobs.Message{To: "a@example.com", Subject: "s", Body: "b"})
			took := time.Since(began)
			require.Error(t, err)
			require.GreaterOrEqual(t, took, tc.atLeast)
			require.Less(t, took, tc.upTo)
			require.Empty(t, srv.Accepted())
		})
	}
}
