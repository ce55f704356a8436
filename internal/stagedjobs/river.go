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

// insertOpts is where a job of kind goes: receipts to ReceiptQueue, the
// rest to River's default queue.
func insertOpts(kind string) river.InsertOpts {
	if kind == string(ReceiptEmail) {
		return river.InsertOpts{Queue: ReceiptQueue}
	}
	return river.InsertOpts{}
}
