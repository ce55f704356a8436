package stagedjobs

import (
	"encoding/json"

	"github.com/riverqueue/river"
)

// Kind makes EventArgs River job arguments.
func (EventArgs) Kind() string { return string(MerchantEvent) }

// Kind makes ReceiptArgs River job arguments.
func (ReceiptArgs) Kind() string { return string(ReceiptEmail) }

// InsertOpts puts receipts on their own queue.
func (ReceiptArgs) InsertOpts() river.InsertOpts { return insertOpts(string(ReceiptEmail)) }

// Kind makes DeliveryArgs River job arguments.
func (DeliveryArgs) Kind() string { return string(WebhookDelivery) }

// InsertOpts puts deliveries on their own queue, unique by their arguments.
func (DeliveryArgs) InsertOpts() river.InsertOpts { return insertOpts(string(WebhookDelivery)) }

// stagedArgs hands a staged job to River as it was staged: its kind and its
// arguments' JSON, untouched. The workers decode the JSON into EventArgs or
// ReceiptArgs.
type stagedArgs struct {
	kind string
	args json.RawMessage
}

func (a stagedArgs) Kind() string                 { return a.kind }
func (a stagedArgs) MarshalJSON() ([]byte, error) { return a.args, nil }

// InsertOpts puts each staged job on its kind's queue.
func (a stagedArgs) InsertOpts() river.InsertOpts { return insertOpts(a.kind) }

// insertOpts is where a job of kind goes: receipts to ReceiptQueue,
// deliveries to WebhookQueue, the rest to River's default queue.
//
// A delivery's job is unique by its arguments, (event, endpoint, cycle),
// in every state but cancelled and discarded: a delivery staged twice runs
// once. The cycle is in the arguments so that a redelivery, which starts
// the next cycle, gets a job of its own even while the job of the previous
// cycle is still waiting for its next retry or is kept as completed (that
// job, when it runs, finds its cycle past and stops unsent).
func insertOpts(kind string) river.InsertOpts {
	switch kind {
	case string(ReceiptEmail):
		return river.InsertOpts{Queue: ReceiptQueue}
	case string(WebhookDelivery):
		return river.InsertOpts{Queue: WebhookQueue, UniqueOpts: river.UniqueOpts{ByArgs: true}}
	default:
		return river.InsertOpts{}
	}
}
