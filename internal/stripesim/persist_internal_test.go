package stripesim

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every field of state is either kept by stateFields or listed, with its
// reason, in forgottenOnRestart: a field added to state fails this test
// until it says which (a table is one line in stateFields).
func TestStateFile_coversEveryFieldOfState(t *testing.T) {
	t.Parallel()
	st := newState()
	covered := map[uintptr]string{}
	for _, f := range stateFields(st, false) {
		require.NotEmpty(t, f.covers, f.name)
		for _, p := range f.covers {
			covered[reflect.ValueOf(p).Pointer()] = f.name
		}
	}
	v := reflect.ValueOf(st).Elem()
	names := map[string]bool{}
	for i := range v.NumField() {
		field := v.Type().Field(i)
		names[field.Name] = true
		_, kept := covered[v.Field(i).Addr().Pointer()]
		_, forgotten := forgottenOnRestart[field.Name]
		require.Truef(t, kept || forgotten,
			"state.%s is neither kept in the state file (stateFields, persist.go) nor listed in forgottenOnRestart", field.Name)
		require.Falsef(t, kept && forgotten, "state.%s is both kept and forgotten", field.Name)
	}
	for name := range forgottenOnRestart {
		require.Truef(t, names[name], "forgottenOnRestart names %s, which state does not have", name)
	}
}

// The objects of the tables are kept through their JSON: a field that JSON
// leaves out (unexported, or tagged "-") would be lost on a restart unless
// a codec keeps it, as chargesCodec keeps charge.released.
func TestStateFile_keepsEveryFieldOfTheObjects(t *testing.T) {
	t.Parallel()
	// event.raw is the event's encoding: made again from the file.
	keptByCodec := map[string]bool{"charge.released": true, "event.made": true, "event.raw": true}
	st := newState()
	for _, f := range stateFields(st, false) {
		for _, p := range f.covers {
			typ := reflect.TypeOf(p).Elem()
			if typ.Kind() != reflect.Struct || typ.NumField() != 2 || typ.Field(0).Name != "byID" {
				continue // not a table
			}
			obj := typ.Field(1).Type.Elem().Elem() // order []*T
			for i := range obj.NumField() {
				field := obj.Field(i)
				if field.IsExported() && field.Tag.Get("json") != "-" {
					continue
				}
				name := obj.Name() + "." + field.Name
				require.Truef(t, keptByCodec[name], "%s is not in the objects' JSON: keep it with a codec in stateFields", name)
			}
		}
	}
}
