package metrics_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/metrics"
)

// specCheck holds a document to the EMF specification's rules, read
// independently of the package's parser: one JSON object on the line; _aws
// an object with a numeric Timestamp and a CloudWatchMetrics array; each
// directive a string Namespace, Dimensions an array of dimension sets of at
// most 30 keys, each key a string member of the root, Metrics an array of
// at most 100 definitions, each Name a member of the root holding a number
// (or an array of numbers) and each Unit a CloudWatch unit.
func specCheck(t *testing.T, line []byte) {
	t.Helper()
	if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("document is not one line: %q", line)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, line)
	}
	if dec.More() {
		t.Fatalf("data after the object: %s", line)
	}
	aws, ok := root["_aws"].(map[string]any)
	if !ok {
		t.Fatalf("_aws is not an object: %s", line)
	}
	if _, ok := aws["Timestamp"].(json.Number); !ok {
		t.Errorf("Timestamp %v is not a number", aws["Timestamp"])
	}
	dirs, ok := aws["CloudWatchMetrics"].([]any)
	if !ok || len(dirs) == 0 {
		t.Fatalf("CloudWatchMetrics %v is not a non-empty array", aws["CloudWatchMetrics"])
	}
	units := strings.Fields("Seconds Microseconds Milliseconds Bytes Kilobytes Megabytes Gigabytes Terabytes Bits " +
		"Kilobits Megabits Gigabits Terabits Percent Count Bytes/Second Kilobytes/Second Megabytes/Second " +
		"Gigabytes/Second Terabytes/Second Bits/Second Kilobits/Second Megabits/Second Gigabits/Second " +
		"Terabits/Second Count/Second None")
	for _, d := range dirs {
		dir, ok := d.(map[string]any)
		if !ok {
			t.Fatalf("directive %v is not an object", d)
		}
		if ns, ok := dir["Namespace"].(string); !ok || ns == "" {
			t.Errorf("Namespace %v", dir["Namespace"])
		}
		sets, ok := dir["Dimensions"].([]any)
		if !ok {
			t.Fatalf("Dimensions %v is not an array", dir["Dimensions"])
		}
		for _, s := range sets {
			set, ok := s.([]any)
			if !ok || len(set) > 30 {
				t.Fatalf("dimension set %v is not an array of at most 30 keys", s)
			}
			for _, k := range set {
				name, ok := k.(string)
				if !ok {
					t.Fatalf("dimension key %v is not a string", k)
				}
				if _, ok := root[name].(string); !ok {
					t.Errorf("dimension %s: root member %v is not a string", name, root[name])
				}
			}
		}
		defs, ok := dir["Metrics"].([]any)
		if !ok || len(defs) > 100 {
			t.Fatalf("Metrics %v is not an array of at most 100 definitions", dir["Metrics"])
		}
		for _, m := range defs {
			def, ok := m.(map[string]any)
			if !ok {
				t.Fatalf("definition %v is not an object", m)
			}
			name, ok := def["Name"].(string)
			if !ok {
				t.Fatalf("metric Name %v is not a string", def["Name"])
			}
			switch v := root[name].(type) {
			case json.Number:
			case []any:
				for _, e := range v {
					if _, ok := e.(json.Number); !ok {
						t.Errorf("metric %s: value %v is not a number", name, e)
					}
				}
			default:
				t.Errorf("metric %s: root member %v is not a number", name, root[name])
			}
			if u, ok := def["Unit"]; ok {
				if s, _ := u.(string); !contains(units, s) {
					t.Errorf("metric %s: unit %v is not a CloudWatch unit", name, u)
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// galley's housekeeping document: exactly the shape the alarms read, and
// it reads back as the two data points it gives.
func TestEncodeGalleyGauges(t *testing.T) {
	at := time.UnixMilli(1764412800123)
	var out bytes.Buffer
	w := metrics.NewWriter(&out, contract.MetricNamespace, metrics.Dimension{Name: contract.MetricDimHouse, Value: "main"})
	if err := w.Emit(at, metrics.Metric{Name: contract.MetricStuckWorkers, Unit: metrics.UnitCount, Value: 0},
		metrics.Metric{Name: contract.MetricLiveWorkers, Unit: metrics.UnitCount, Value: 3}); err != nil {
		t.Fatal(err)
	}
	want := `{"_aws":{"Timestamp":1764412800123,"CloudWatchMetrics":[{"Namespace":"galley","Dimensions":[["House"]],` +
		`"Metrics":[{"Name":"StuckWorkers","Unit":"Count"},{"Name":"LiveWorkers","Unit":"Count"}]}]},` +
		`"House":"main","StuckWorkers":0,"LiveWorkers":3}` + "\n"
	if out.String() != want {
		t.Errorf("document\n%s\nwant\n%s", out.String(), want)
	}
	specCheck(t, out.Bytes())

	got, ok := metrics.Parse(out.Bytes())
	if !ok || len(got) != 2 {
		t.Fatalf("Parse = %+v, %v", got, ok)
	}
	for i, w := range []struct {
		name  string
		value float64
	}{{contract.MetricStuckWorkers, 0}, {contract.MetricLiveWorkers, 3}} {
		d := got[i]
		if d.Namespace != "galley" || d.Name != w.name || d.Value != w.value || d.Unit != "Count" ||
			len(d.Dimensions) != 1 || d.Dimensions["House"] != "main" || d.Resolution != 60 || !d.Time.Equal(at) {
			t.Errorf("datum %d = %+v, want %s %v", i, d, w.name, w.value)
		}
	}
}

// Round trips at the limits: 30 dimensions and 100 metrics pass, with
// fractional and negative values, no unit, and names that need escaping.
func TestEncodeParseRoundTripAtLimits(t *testing.T) {
	dims := make([]metrics.Dimension, 30)
	for i := range dims {
		dims[i] = metrics.Dimension{Name: fmt.Sprintf("Dim%02d", i), Value: fmt.Sprintf(`v "%d" \ x`, i)}
	}
	ms := make([]metrics.Metric, 100)
	for i := range ms {
		ms[i] = metrics.Metric{Name: fmt.Sprintf("M%03d", i), Value: float64(i)/4 - 10}
	}
	ms[7].Unit = "Bytes/Second"
	at := time.UnixMilli(1700000000000)
	line, err := metrics.Encode(at, "galley/test", dims, ms)
	if err != nil {
		t.Fatal(err)
	}
	specCheck(t, line)
	got, ok := metrics.Parse(line)
	if !ok || len(got) != 100 {
		t.Fatalf("Parse: %d data points, %v", len(got), ok)
	}
	for i, d := range got {
		if d.Name != ms[i].Name || d.Value != ms[i].Value || d.Unit != ms[i].Unit || d.Namespace != "galley/test" ||
			len(d.Dimensions) != 30 || d.Dimensions["Dim05"] != `v "5" \ x` || !d.Time.Equal(at) {
			t.Fatalf("datum %d = %+v, want %+v", i, d, ms[i])
		}
	}

	if _, err := metrics.Encode(at, "galley", append(dims, metrics.Dimension{Name: "Dim30", Value: "x"}), ms[:1]); err == nil {
		t.Error("31 dimensions encoded")
	}
	if _, err := metrics.Encode(at, "galley", dims[:1], append(ms, metrics.Metric{Name: "M100"})); err == nil {
		t.Error("101 metrics encoded")
	}
}

// The writer refuses what CloudWatch would reject, and writes nothing.
func TestEncodeRefuses(t *testing.T) {
	house := []metrics.Dimension{{Name: "House", Value: "main"}}
	one := []metrics.Metric{{Name: "LiveWorkers", Unit: "Count", Value: 1}}
	tests := []struct {
		name string
		ns   string
		dims []metrics.Dimension
		ms   []metrics.Metric
	}{
		{"no metric", "galley", house, nil},
		{"empty namespace", "", house, one},
		{"AWS namespace", "AWS/Lambda", house, one},
		{"namespace too long", strings.Repeat("n", 256), house, one},
		{"NaN", "galley", house, []metrics.Metric{{Name: "X", Value: math.NaN()}}},
		{"infinity", "galley", house, []metrics.Metric{{Name: "X", Value: math.Inf(1)}}},
		{"unknown unit", "galley", house, []metrics.Metric{{Name: "X", Unit: "Workers", Value: 1}}},
		{"metric named _aws", "galley", house, []metrics.Metric{{Name: "_aws", Value: 1}}},
		{"metric named as a dimension", "galley", house, []metrics.Metric{{Name: "House", Value: 1}}},
		{"metric twice", "galley", house, append(one, one...)},
		{"blank metric name", "galley", house, []metrics.Metric{{Name: "  ", Value: 1}}},
		{"dimension value empty", "galley", []metrics.Dimension{{Name: "House", Value: ""}}, one},
		{"dimension value not ASCII", "galley", []metrics.Dimension{{Name: "House", Value: "cuisine-é"}}, one},
		{"dimension value with a newline", "galley", []metrics.Dimension{{Name: "House", Value: "a\nb"}}, one},
		{"dimension value too long", "galley", []metrics.Dimension{{Name: "House", Value: strings.Repeat("v", 1025)}}, one},
		{"dimension name with a colon first", "galley", []metrics.Dimension{{Name: ":House", Value: "main"}}, one},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := metrics.NewWriter(&out, tt.ns, tt.dims...).Emit(time.Now(), tt.ms...)
			if err == nil || out.Len() != 0 {
				t.Errorf("Emit = %v, wrote %q", err, out.String())
			}
		})
	}
}

// Parse takes what the specification allows: several directives and
// dimension sets, an empty dimension set, arrays of values, high resolution,
// members it does not know.
func TestParseAccepts(t *testing.T) {
	line := `{"_aws":{"Timestamp":1700000000000,"LogGroupName":"g","CloudWatchMetrics":[` +
		`{"Namespace":"a","Dimensions":[["House"],["House","Fn"],[]],"Metrics":[{"Name":"Lat","Unit":"Milliseconds","StorageResolution":1}]},` +
		`{"Namespace":"b","Dimensions":[["Fn"]],"Metrics":[{"Name":"N"}]}]},` +
		`"House":"main","Fn":"reads","Lat":[1.5,2],"N":-7,"requestId":"r-1","level":"INFO"}`
	got, ok := metrics.Parse([]byte(line + "\r\n"))
	if !ok {
		t.Fatal("a valid document was refused")
	}
	type key struct {
		ns, name string
		dims     string
		v        float64
		res      int
		unit     string
	}
	var keys []key
	for _, d := range got {
		dims, _ := json.Marshal(d.Dimensions)
		keys = append(keys, key{d.Namespace, d.Name, string(dims), d.Value, d.Resolution, d.Unit})
	}
	want := []key{
		{"a", "Lat", `{"House":"main"}`, 1.5, 1, "Milliseconds"}, {"a", "Lat", `{"House":"main"}`, 2, 1, "Milliseconds"},
		{"a", "Lat", `{"Fn":"reads","House":"main"}`, 1.5, 1, "Milliseconds"}, {"a", "Lat", `{"Fn":"reads","House":"main"}`, 2, 1, "Milliseconds"},
		{"a", "Lat", `{}`, 1.5, 1, "Milliseconds"}, {"a", "Lat", `{}`, 2, 1, "Milliseconds"},
		{"b", "N", `{"Fn":"reads"}`, -7, 60, ""},
	}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("data points\n%v\nwant\n%v", keys, want)
	}
}

// Parse refuses what CloudWatch would not extract, and lines that are not
// EMF at all.
func TestParseRefuses(t *testing.T) {
	doc := func(meta, members string) string {
		return `{"_aws":` + meta + members + `}`
	}
	good := `{"Timestamp":1700000000000,"CloudWatchMetrics":[{"Namespace":"galley","Dimensions":[["House"]],"Metrics":[{"Name":"X","Unit":"Count"}]}]}`
	if _, ok := metrics.Parse([]byte(doc(good, `,"House":"main","X":1`))); !ok {
		t.Fatal("the reference document is refused")
	}
	many := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return strings.Join(parts, ",")
	}
	tests := map[string]string{
		"empty":                    ``,
		"not JSON":                 `hello`,
		"a slog line":              `{"time":"2023-11-14T22:00:00Z","level":"INFO","msg":"doorbell sweep"}`,
		"text before the object":   `2023-11-14T22:00:00Z INFO ` + doc(good, `,"House":"main","X":1`),
		"two objects":              doc(good, `,"House":"main","X":1`) + `{}`,
		"_aws not an object":       `{"_aws":[],"X":1}`,
		"no CloudWatchMetrics":     doc(`{"Timestamp":1700000000000}`, `,"X":1`),
		"CloudWatchMetrics null":   doc(`{"Timestamp":1700000000000,"CloudWatchMetrics":null}`, `,"X":1`),
		"no Timestamp":             doc(`{"CloudWatchMetrics":[{"Namespace":"galley","Dimensions":[[]],"Metrics":[{"Name":"X"}]}]}`, `,"X":1`),
		"Timestamp a string":       doc(`{"Timestamp":"1700000000000","CloudWatchMetrics":[]}`, ``),
		"Timestamp fractional":     doc(`{"Timestamp":1.5,"CloudWatchMetrics":[]}`, ``),
		"no Namespace":             doc(`{"Timestamp":1,"CloudWatchMetrics":[{"Dimensions":[[]],"Metrics":[{"Name":"X"}]}]}`, `,"X":1`),
		"Namespace a number":       doc(`{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":5,"Dimensions":[[]],"Metrics":[{"Name":"X"}]}]}`, `,"X":1`),
		"no Dimensions":            doc(`{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"g","Metrics":[{"Name":"X"}]}]}`, `,"X":1`),
		"no Metrics":               doc(`{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"g","Dimensions":[[]]}]}`, `,"X":1`),
		"dimension member absent":  doc(good, `,"X":1`),
		"dimension member number":  doc(good, `,"House":3,"X":1`),
		"dimension member empty":   doc(good, `,"House":"","X":1`),
		"dimension key not string": doc(`{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"g","Dimensions":[[1]],"Metrics":[{"Name":"X"}]}]}`, `,"X":1`),
		"metric member absent":     doc(good, `,"House":"main"`),
		"metric member a string":   doc(good, `,"House":"main","X":"1"`),
		"metric member null":       doc(good, `,"House":"main","X":null`),
		"metric member bool":       doc(good, `,"House":"main","X":true`),
		"metric array with string": doc(good, `,"House":"main","X":[1,"2"]`),
		"metric array empty":       doc(good, `,"House":"main","X":[]`),
		"metric array of 101":      doc(good, `,"House":"main","X":[`+many(101, func(int) string { return "1" })+`]`),
		"unknown unit":             doc(`{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"g","Dimensions":[[]],"Metrics":[{"Name":"X","Unit":"Workers"}]}]}`, `,"X":1`),
		"storage resolution 5":     doc(`{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"g","Dimensions":[[]],"Metrics":[{"Name":"X","StorageResolution":5}]}]}`, `,"X":1`),
		"metric without a name":    doc(`{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"g","Dimensions":[[]],"Metrics":[{"Unit":"Count"}]}]}`, `,"X":1`),
		"31 dimensions": doc(`{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"g","Dimensions":[[`+
			many(31, func(i int) string { return fmt.Sprintf(`"D%d"`, i) })+`]],"Metrics":[{"Name":"X"}]}]}`,
			`,`+many(31, func(i int) string { return fmt.Sprintf(`"D%d":"v"`, i) })+`,"X":1`),
		"101 metrics": doc(`{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"g","Dimensions":[[]],"Metrics":[`+
			many(101, func(i int) string { return fmt.Sprintf(`{"Name":"M%d"}`, i) })+`]}]}`,
			`,`+many(101, func(i int) string { return fmt.Sprintf(`"M%d":1`, i) })),
	}
	for name, line := range tests {
		t.Run(name, func(t *testing.T) {
			if got, ok := metrics.Parse([]byte(line)); ok {
				t.Errorf("Parse(%s) = %+v, true", line, got)
			}
		})
	}
}

// recorder keeps each Write call apart.
type recorder struct {
	mu     sync.Mutex
	writes [][]byte
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, append([]byte(nil), p...))
	return len(p), nil
}

// Each Emit is one Write of one whole line, even when many goroutines
// emit at once: a log line on the same stdout never splits a document.
func TestWriterOneWritePerLine(t *testing.T) {
	var rec recorder
	w := metrics.NewWriter(&rec, contract.MetricNamespace, metrics.Dimension{Name: contract.MetricDimHouse, Value: "main"})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			if err := w.Emit(time.Now(), metrics.Metric{Name: contract.MetricLiveWorkers, Unit: metrics.UnitCount, Value: float64(i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if len(rec.writes) != 16 {
		t.Fatalf("%d writes, want 16", len(rec.writes))
	}
	seen := map[float64]bool{}
	for _, p := range rec.writes {
		specCheck(t, p)
		d, ok := metrics.Parse(p)
		if !ok || len(d) != 1 {
			t.Fatalf("write %q does not parse", p)
		}
		seen[d[0].Value] = true
	}
	if len(seen) != 16 {
		t.Errorf("values %v, want 0..15 once each", seen)
	}
}
