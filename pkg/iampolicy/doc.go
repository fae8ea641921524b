// Package iampolicy parses IAM identity-based policy documents and
// evaluates requests against them, so that aws-local can hold every AWS
// call a function or a worker makes to the policies the CloudFormation
// template gives that caller's role. It is pure Go: no I/O, no AWS calls.
//
// # Documents
//
// Parse takes a policy document as JSON; FromDocument takes one already
// decoded (the template loader's map[string]any, with intrinsic functions
// resolved to strings). Statement may be one object or a list; Action,
// NotAction, Resource, NotResource and condition values may be one value or
// a list; condition values may be strings, booleans or numbers.
//
// # Evaluation
//
// Evaluate applies the rules for identity-based policies of one principal
// in one account: an explicit Deny in any statement wins; otherwise any
// Allow allows; otherwise the request is implicitly denied. A statement
// applies when its action, its resource and every one of its conditions
// match.
//
//   - Actions match case-insensitively, with * and ? wildcards
//     ("sqs:*", "dynamodb:Get*", "*").
//   - Resources match case-sensitively, the whole ARN as one string, with *
//     and ? wildcards; * matches across "/" and ":" (so "arn:aws:sqs:*"
//     matches every queue). This is what AWS does for the patterns
//     templates use; AWS additionally matches ARNs segment by segment,
//     which this package does not model.
//   - Conditions: every operator in a statement and every key in an
//     operator must hold (AND); any of a key's values may match (OR).
//     Condition key names match case-insensitively. A key missing from the
//     request context matches nothing, as in AWS: a positive operator is
//     false and a negated one (StringNotEquals, ArnNotLike, ...) true; an
//     ...IfExists operator and ForAllValues hold, ForAnyValue does not;
//     Null tests presence.
//     Without a set prefix, a positive operator holds when any request
//     value matches any policy value, and a negated one (StringNotEquals,
//     StringNotLike, ArnNotEquals, ArnNotLike, NumericNotEquals,
//     StringNotEqualsIgnoreCase) when no request value matches any policy
//     value. ForAnyValue: holds when at least one request value matches
//     (for a negated operator: matches none of the policy values);
//     ForAllValues: when every request value does.
//
// Supported condition operators: StringEquals, StringNotEquals,
// StringEqualsIgnoreCase, StringNotEqualsIgnoreCase, StringLike,
// StringNotLike, ArnEquals, ArnLike, ArnNotEquals, ArnNotLike (ARN
// operators compare the six colon-separated ARN parts one by one, with
// wildcards in each, as AWS does), Bool, Null, NumericEquals,
// NumericNotEquals, NumericLessThan, NumericLessThanEquals,
// NumericGreaterThan, NumericGreaterThanEquals; each (but Null) with the
// IfExists suffix, and each with the ForAnyValue: or ForAllValues: prefix.
//
// # Trust policies
//
// ParseTrust and TrustFromDocument read a role's trust policy: statements
// with Principal or NotPrincipal ("*", or AWS/Service/Federated/
// CanonicalUser values; an account id is read as its root; partial
// wildcards are refused, as IAM refuses them) and no Resource.
// TrustPolicy.Evaluate decides whether it lets a Caller (the identifiers it
// may be named by: a role session is its role ARN, its session ARN and its
// account root) perform an action such as sts:AssumeRole, with the same
// rules for actions and conditions, an explicit Deny winning.
//
// # Not modelled
//
// Anything this package cannot evaluate faithfully is refused by Parse
// rather than ignored, since a more forgiving evaluator would hide a
// permission bug: other condition operators (Date*, IpAddress,
// NotIpAddress, Binary*), Principal and NotPrincipal (they have no place in
// an identity-based policy; AWS rejects them there too), and policy
// variables (${aws:username} and the like) in a 2012-10-17 document.
// Session policies are
// evaluated by the caller (local/iamgate), as a second Evaluate whose
// answer must also allow. Outside the documents themselves it does not
// model permission
// boundaries, service control policies, resource-based policies other than
// trust policies, cross-account rules, or the per-service condition keys a
// caller does not put in the request context (a condition on such a key is
// false, never true).
package iampolicy
