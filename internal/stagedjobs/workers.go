package stagedjobs

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// AddWorkers registers the workers of the staged jobs with River.
func AddWorkers(workers *river.Workers, pool *pgxpool.Pool, mailer Mailer) {
	river.AddWorker(workers, &EventWorker{pool: pool})
	river.AddWorker(workers, &ReceiptWorker{pool: pool, mailer: mailer})
}

// EventWorker writes a merchant event. The event's id was chosen when the
// change was staged, so a job that runs twice still writes one event.
type EventWorker struct {
	river.WorkerDefaults[EventArgs]
	pool *pgxpool.Pool
}

// Work writes the event, unless it is already there.
func (w *EventWorker) Work(ctx context.Context, job *river.Job[EventArgs]) error {
	a := job.Args
	_, err := queries.InsertEvent(ctx, w.pool, dbsqlc.InsertEventParams{
		ID: a.EventID, UserID: a.UserID, Type: a.Type, Data: a.Object, CreatedAt: a.Created,
	})
	return err
}

// ReceiptWorker sends a receipt once, however often its job runs.
type ReceiptWorker struct {
	river.WorkerDefaults[ReceiptArgs]
	pool   *pgxpool.Pool
	mailer Mailer
}

// Work sends the receipt unless its row says it was sent.
//
// The row is claimed (created or locked) and marked sent in one transaction
// around the send, so two runs of the same job at once cannot both send: the
// second waits for the first's row lock, then sees sent_at. This holds a
// transaction across the SMTP call on purpose; it is the price of "once".
// If the process dies after the send and before the commit, the next run
// sends again: email offers no way to deduplicate on the far side.
func (w *ReceiptWorker) Work(ctx context.Context, job *river.Job[ReceiptArgs]) error {
	a := job.Args
	kind := a.Reason
	if a.Refund != "" {
		kind += ":" + a.Refund
	}
	return db.WithTx(ctx, w.pool, db.TxOptions{Isolation: pgx.ReadCommitted}, func(ctx context.Context, tx pgx.Tx) error {
		to, err := queries.GetUserEmail(ctx, tx, a.UserID)
		if err != nil {
			return err
		}
		receipt, err := queries.ClaimReceipt(ctx, tx, dbsqlc.ClaimReceiptParams{PaymentID: a.Payment, Kind: kind, Recipient: to})
		if err != nil {
			return err
		}
		if receipt.SentAt.Valid {
			return nil
		}
		if err := w.mailer.Send(ctx, receiptMessage(to, a)); err != nil {
			return fmt.Errorf("sending receipt: %w", err)
		}
		return queries.MarkReceiptSent(ctx, tx, dbsqlc.MarkReceiptSentParams{PaymentID: a.Payment, Kind: kind})
	})
}

func receiptMessage(to string, a ReceiptArgs) Message {
	what := "Payment"
	if a.Reason == "refund" {
		what = "Refund"
	}
	return Message{
		To:      to,
		Subject: fmt.Sprintf("%s receipt for %s", what, a.Payment),
		Body: fmt.Sprintf("%s of %s %s for payment %s.\n\nThank you.\n",
			what, formatAmount(a.Amount), strings.ToUpper(a.Currency), a.Payment),
	}
}

// formatAmount writes minor units as a decimal amount (2000 -> 20.00). It
// assumes two decimals, which fits most currencies; a receipt for JPY would
// need ISO 4217's exponent table.
func formatAmount(minor int64) string {
	return fmt.Sprintf("%d.%02d", minor/100, minor%100)
}
