package store_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

var timeType = reflect.TypeFor[time.Time]()

// filler sets every exported field reachable from a value to a non-zero
// value derived from a counter, so two fillers give equal values and every
// leaf differs from its neighbours. It walks by reflection, so a field
// added to a record later is filled (and so checked) without editing the
// test; a kind it cannot fill fails the test rather than being skipped.
type filler struct {
	t testing.TB
	n int
}

func (f *filler) next() int { f.n++; return f.n }

func (f *filler) fill(v reflect.Value, path string) {
	if v.Type() == timeType {
		n := f.next()
		v.Set(reflect.ValueOf(time.Date(2026, 1, 1, 0, 0, n, n, time.FixedZone("Z", 3600))))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprint(path, "-", f.next()))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.next()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(f.next()))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(f.next()) + 0.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), path)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			f.fill(s.Index(i), fmt.Sprint(path, "[", i, "]"))
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			f.fill(v.Index(i), fmt.Sprint(path, "[", i, "]"))
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 2 {
			k := reflect.New(v.Type().Key()).Elem()
			f.fill(k, path+".key")
			e := reflect.New(v.Type().Elem()).Elem()
			f.fill(e, path+"[k]")
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			if !sf.IsExported() {
				f.t.Fatalf("%s.%s: unexported field; Clone's test cannot fill it", path, sf.Name)
			}
			f.fill(v.Field(i), path+"."+sf.Name)
		}
	default:
		f.t.Fatalf("%s: cannot fill a %s; extend the test and Clone", path, v.Kind())
	}
}

// mutate changes every leaf reachable from v in place, through pointers,
// maps and slices, the way a careless caller might.
func mutate(v reflect.Value) {
	if v.Type() == timeType {
		v.Set(reflect.ValueOf(time.Unix(1, 0)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "!")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1000)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 100)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 1000)
	case reflect.Pointer:
		if !v.IsNil() {
			mutate(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			mutate(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			mutate(e)
			v.SetMapIndex(k, e)
		}
		k := reflect.New(v.Type().Key()).Elem()
		mutate(k) // a fresh key, not in the map
		v.SetMapIndex(k, reflect.New(v.Type().Elem()).Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				mutate(v.Field(i))
			}
		}
	}
}

// aliases lists the paths at which a and b (of one type) share a pointer,
// a map or a slice's backing array. A time's zone pointer is immutable and
// not counted.
func aliases(a, b reflect.Value, path string) []string {
	if a.Type() == timeType {
		return nil
	}
	var out []string
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			out = append(out, path)
		}
		return append(out, aliases(a.Elem(), b.Elem(), path)...)
	case reflect.Map:
		if a.IsNil() || b.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			out = append(out, path)
		}
		for _, k := range a.MapKeys() {
			if e := b.MapIndex(k); e.IsValid() {
				out = append(out, aliases(a.MapIndex(k), e, fmt.Sprint(path, "[", k, "]"))...)
			}
		}
	case reflect.Slice:
		if a.Cap() > 0 && b.Cap() > 0 && a.Pointer() == b.Pointer() {
			out = append(out, path)
		}
		for i := range min(a.Len(), b.Len()) {
			out = append(out, aliases(a.Index(i), b.Index(i), fmt.Sprint(path, "[", i, "]"))...)
		}
	case reflect.Array:
		for i := range a.Len() {
			out = append(out, aliases(a.Index(i), b.Index(i), fmt.Sprint(path, "[", i, "]"))...)
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if sf := a.Type().Field(i); sf.IsExported() {
				out = append(out, aliases(a.Field(i), b.Field(i), path+"."+sf.Name)...)
			}
		}
	case reflect.Interface:
		if !a.IsNil() && !b.IsNil() {
			out = append(out, aliases(a.Elem(), b.Elem(), path)...)
		}
	}
	return out
}

// show prints a resource with its worker, not the worker's address.
func show(r store.Resource) string {
	b, _ := json.Marshal(r)
	return string(b)
}

func fullResource(t *testing.T) store.Resource {
	var r store.Resource
	(&filler{t: t}).fill(reflect.ValueOf(&r).Elem(), "Resource")
	return r
}

func TestCloneIsDeepAndComplete(t *testing.T) {
	orig := fullResource(t)
	if orig.Worker == nil || orig.Worker.Usage == nil || orig.Worker.Usage.Tokens == nil || orig.Worker.Usage.Tokens.CacheWrite == nil {
		t.Fatal("the filler left a pointer nil")
	}
	c := orig.Clone()
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("Clone differs from the original:\n got %s\nwant %s", show(c), show(orig))
	}
	if got := aliases(reflect.ValueOf(c), reflect.ValueOf(orig), "Resource"); len(got) > 0 {
		t.Errorf("Clone shares memory with the original at %v", got)
	}
	mutate(reflect.ValueOf(&c).Elem())
	if reflect.DeepEqual(c, orig) {
		t.Fatal("mutate changed nothing")
	}
	if want := fullResource(t); !reflect.DeepEqual(orig, want) {
		t.Errorf("changing the clone changed the original:\n got %s\nwant %s", show(orig), show(want))
	}
}

// The checks above must be able to fail: a shallow copy aliases, and
// changing it changes the original.
func TestCloneChecksCatchAShallowCopy(t *testing.T) {
	orig := fullResource(t)
	shallow := orig
	w := *orig.Worker
	shallow.Worker = &w // one level deep, like a hand-written Clone that forgot the rest
	got := aliases(reflect.ValueOf(shallow), reflect.ValueOf(orig), "Resource")
	for _, want := range []string{"Resource.Worker.Questions", "Resource.Worker.Agent", "Resource.Worker.Usage"} {
		if !slices.Contains(got, want) {
			t.Errorf("aliases missed %s: %v", want, got)
		}
	}
	mutate(reflect.ValueOf(&shallow).Elem())
	if reflect.DeepEqual(orig, fullResource(t)) {
		t.Error("mutating a shallow copy left the original unchanged; mutate is not reaching through")
	}
}

func TestCloneKeepsNilsAndEmpties(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    store.Resource
	}{
		{"zero", store.Resource{}},
		{"worktree", store.Resource{Kind: "worktree", Handle: "wt-1", Path: "/w"}},
		{"bare worker", store.Resource{Kind: "worker", Handle: "w", Worker: &store.Worker{}}},
		{"empty questions", store.Resource{Worker: &store.Worker{Questions: map[string]string{}}}},
		{"usage without counts", store.Resource{Worker: &store.Worker{Usage: &protocol.UsageReport{Source: "agent", Tokens: &protocol.Tokens{}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.r.Clone()
			if !reflect.DeepEqual(c, tc.r) {
				t.Errorf("Clone = %+v, want %+v", c, tc.r)
			}
			if got := aliases(reflect.ValueOf(c), reflect.ValueOf(tc.r), "Resource"); len(got) > 0 {
				t.Errorf("Clone shares memory at %v", got)
			}
		})
	}
}
