// Package metrics writes and reads CloudWatch metrics in the embedded
// metric format (EMF): one JSON object per log line, which CloudWatch Logs
// turns into metric data points with no PutMetricData call and so no extra
// permission. A Lambda function writes the line on its stdout; with the
// function's JSON log format a stdout line that is a JSON object is kept as
// it is, and CloudWatch extracts the metrics from it.
//
// The writer refuses a document CloudWatch would reject, and Parse is as
// strict as CloudWatch's extraction: a line that is not a valid EMF
// document yields no data point. Parse serves the tests and aws-local,
// which captures the metrics from the functions' logs. galley's own
// metrics go by the contract's names (package contract: MetricNamespace,
// MetricDimHouse, MetricLiveWorkers, MetricStuckWorkers), which the stack's
// alarms read.
//
// Specification:
// https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
package metrics

// UnitCount is the CloudWatch unit of a count.
const UnitCount = "Count"

// Limits of one EMF document: the specification's counts, and the lengths
// CloudWatch's own API allows (PutMetricData, Dimension).
const (
	MaxDimensions       = 30   // dimension keys in one dimension set
	MaxMetrics          = 100  // metric definitions in one directive
	MaxValues           = 100  // values of one metric
	MaxNamespaceLen     = 255  // characters of a namespace
	MaxDimensionNameLen = 255  // characters of a dimension name
	MaxDimensionValLen  = 1024 // characters of a dimension value
	MaxMetricNameLen    = 255  // characters of a metric name
)

// units are the units CloudWatch accepts.
var units = map[string]bool{
	"Seconds": true, "Microseconds": true, "Milliseconds": true,
	"Bytes": true, "Kilobytes": true, "Megabytes": true, "Gigabytes": true, "Terabytes": true,
	"Bits": true, "Kilobits": true, "Megabits": true, "Gigabits": true, "Terabits": true,
	"Percent": true, "Count": true,
	"Bytes/Second": true, "Kilobytes/Second": true, "Megabytes/Second": true, "Gigabytes/Second": true, "Terabytes/Second": true,
	"Bits/Second": true, "Kilobits/Second": true, "Megabits/Second": true, "Gigabits/Second": true, "Terabits/Second": true,
	"Count/Second": true, "None": true,
}
