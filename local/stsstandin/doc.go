// Package stsstandin is a stand-in for AWS STS on one machine: an
// http.Handler speaking STS's awsQuery protocol (a form-encoded POST of
// Action=<Op>&Version=2011-06-15&..., answered in XML in the
// https://sts.amazonaws.com/doc/2011-06-15/ namespace, errors as
// <ErrorResponse><Error><Type>Sender</Type><Code>..</Code><Message>..</Message></Error><RequestId>..</RequestId></ErrorResponse>),
// so that the real AWS SDK for Go v2 STS client, pointed at the IAM gate in
// front of it, assumes roles the way a galley function does on AWS.
//
// # Behind the gate
//
// The stand-in authenticates nobody itself. It sits behind an iamgate.Gate
// for iamgate.STS, which verifies the caller's SigV4 signature, authorizes
// sts:AssumeRole on the role against the caller's identity-based (and
// session) policies, and tells the stand-in who the caller is in
// iamgate.CallerHeader (removing any copy a client sent). Serve the Server
// only as the gate's upstream handler, never on a listener of its own: a
// request that reached it some other way could name any caller. A request
// without the header is refused (MissingAuthenticationToken).
//
// # Operations
//
//   - AssumeRole with RoleArn, RoleSessionName, DurationSeconds, Policy and
//     ExternalId. It refuses what AWS refuses: the parameters' constraints
//     as one ValidationError listing each ("1 validation error detected:
//     Value 'x' at 'roleSessionName' failed to satisfy constraint: ...":
//     RoleArn 20..2048 characters, RoleSessionName 2..64 of [\w+=,.@-],
//     DurationSeconds 900..43200, Policy 1..2048 characters of
//     [\u0009\u000A\u000D\u0020-\u00FF], ExternalId 2..1224 of
//     [\w+=,.@:/-]); "Request ARN is invalid" for a RoleArn that is not an
//     ARN; AccessDenied (HTTP 403, "User: <caller's session ARN> is not
//     authorized to perform: sts:AssumeRole on resource: <RoleArn>") for a
//     role the Roles function does not know or whose trust policy does not
//     allow the caller (see below); ValidationError for a duration over
//     the role's MaxSessionDuration (default one hour) or, since every
//     caller here is itself a role session, over role chaining's one-hour
//     limit; MalformedPolicyDocument for a Policy that is not a policy
//     package iampolicy can evaluate; PackedPolicyTooLarge when the policy's
//     packed size passes 100 % (see PackedBudget). Session tags, managed
//     session policies (PolicyArns), MFA, SourceIdentity and provided
//     contexts are not modelled: a request naming them is refused, never
//     half served.
//   - GetCallerIdentity: the caller's session ARN, its UserId
//     (<role id>:<session name>) and account.
//
// Anything else answers InvalidAction.
//
// # Trust
//
// The role's trust policy (iampolicy.TrustPolicy) must allow the caller
// sts:AssumeRole: a statement with Effect Allow whose Principal names the
// caller's role ARN, its session ARN, its account (an account id or
// arn:aws:iam::<account>:root) or "*", whose Action matches sts:AssumeRole
// and whose conditions hold (aws:PrincipalArn, aws:PrincipalAccount,
// aws:PrincipalType, aws:SecureTransport, aws:RequestedRegion,
// sts:RoleSessionName, sts:ExternalId), and no such Deny. On AWS a trust
// policy naming the caller's role ARN directly would let it assume the role
// even without an identity policy allowing sts:AssumeRole; here the gate
// always asks for that identity permission too, which is stricter.
//
// # Issued credentials
//
// An access key id ASIA + 16 characters, a 40-character secret, a session
// token, and Expiration (now + DurationSeconds). Each issue becomes an
// iamgate.Principal with the role's policies as the Roles function gives
// them at that moment, the session policy, and the expiry: Server.Lookup
// finds it by access key id, so a Server is an iamgate.Principals (combine
// it with the stack's own with iamgate.Chain), and WithOnIssue hears of
// each issue. Expired sessions are still found (the gates answer
// ExpiredToken) for a day, then forgotten. Secrets are never logged.
package stsstandin
