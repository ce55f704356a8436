package stagedjobs

import (
	"encoding/json"
)

// Kind makes EventArgs River job arguments.
func (EventArgs) Kind() string { return string(MerchantEvent) }

// Kind makes ReceiptArgs River job arguments.
func (ReceiptArgs) Kind() string { return string(ReceiptEmail) }

// stagedArgs hands a staged job to River as it was staged: its kind and its
// arguments' JSON, untouched. The workers decode the JSON into EventArgs or
// ReceiptArgs.
type stagedArgs struct {
	kind string
	args json.RawMessage
}

func (a stagedArgs) Kind() string                 { return a.kind }
func (a stagedArgs) MarshalJSON() ([]byte, error) { return a.args, nil }
