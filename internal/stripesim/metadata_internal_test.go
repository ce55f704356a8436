package stripesim

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// metadata encodes as the map[string]string it replaced did (the objects'
// JSON, the state file's), and a state file's metadata decodes back.
func TestMetadata_encodesAsAMap(t *testing.T) {
	t.Parallel()
	for _, md := range []map[string]string{
		{},
		{"payment": "pay_1"},
		{"b": "2", "a": "1", "c": `it's "quoted" <&>`, "é": "ü", "": "empty key"},
	} {
		want, err := json.Marshal(md)
		require.NoError(t, err)
		got, err := json.Marshal(newMetadata(md))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))

		var back metadata
		require.NoError(t, json.Unmarshal(want, &back))
		require.Equal(t, newMetadata(md), back)
		for k, v := range md {
			value, ok := back.get(k)
			require.True(t, ok, k)
			require.Equal(t, v, value)
		}
		_, ok := back.get("absent")
		require.False(t, ok)
	}
	got, err := json.Marshal(struct {
		M metadata `json:"metadata"`
	}{})
	require.NoError(t, err)
	require.JSONEq(t, `{"metadata":{}}`, string(got), "Stripe's empty metadata is {}")
}
