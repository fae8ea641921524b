// Package iamgate enforces IAM in front of a local AWS endpoint, so that
// aws-local refuses what AWS would: every request is authenticated by
// Signature Version 4 against a consumer-supplied set of principals (role
// sessions with their keys and the role's policies from the template),
// mapped to the IAM actions, resources and condition keys AWS authorizes
// it by, evaluated with package iampolicy, and only then passed to the
// upstream stand-in (DynamoDB Local, fauxqs, the Secrets Manager, ECS,
// STS and S3 stand-ins; Proxy makes one from a URL). A Gate serves one
// service.
//
// # Wiring
//
//	ca, caPEM, _ := iamgate.NewLocalCA()   // write caPEM to a file; give callers AWS_CA_BUNDLE=<file>
//	up, _ := iamgate.Proxy("http://127.0.0.1:18000")
//	g, _ := iamgate.New(iamgate.DynamoDB, up, principals)
//	srv := httptest.NewUnstartedServer(g); srv.TLS = ca; srv.StartTLS()
//	// callers: AWS_ENDPOINT_URL_DYNAMODB=https://127.0.0.1:<port>
//
// # Authentication
//
// Only the Authorization header form of SigV4 (AWS4-HMAC-SHA256) is
// accepted. The credential scope must name the gate's region and service;
// Host and X-Amz-Date must be signed; X-Amz-Date must be within 5 minutes
// of the clock; the signature is recomputed over the request as received
// (the body's SHA-256, the signed headers) and compared in constant time.
// A principal with a session token needs X-Amz-Security-Token, signed and
// equal; one without must not send one. A principal whose Expires has
// passed (temporary credentials, as the STS stand-in issues) is refused
// once its signature is verified. Failures answer as AWS's JSON services
// do: MissingAuthenticationTokenException (no Authorization),
// IncompleteSignatureException (malformed), UnrecognizedClientException
// "The security token included in the request is invalid." (unknown key
// or wrong token), InvalidSignatureException (scope, time or signature),
// ExpiredTokenException "The security token included in the request is
// expired". SQS also names the query-protocol code in x-amzn-query-error
// (InvalidClientTokenId, SignatureDoesNotMatch, ExpiredToken, ...), which
// the SDK reports as ErrorCode(), and answers HTTP 403; DynamoDB, Secrets
// Manager and ECS answer 400. STS answers those query codes in its XML
// ErrorResponse (<Type>Sender</Type><Code>ExpiredToken</Code>...), HTTP 403.
//
// # Session policies
//
// A Principal's SessionPolicies (the Policy of the sts:AssumeRole that made
// the session) bound it, as AWS evaluates a role session with a session
// policy: an explicit Deny in the role's policies or in a session policy
// denies; otherwise both the role's policies and the session policies must
// allow. Without session policies the role's policies alone decide.
//
// # Denials
//
// A denial answers AccessDenied as each service does, naming the caller's
// session (arn:aws:sts::<account>:assumed-role/<role>/<session>), the
// action and the resource, and why: "because no identity-based policy
// allows the <action> action", "with an explicit deny in an identity-based
// policy", "because no session policy allows the <action> action" or "with
// an explicit deny in a session policy":
//
//   - DynamoDB: 400, __type com.amazon.coral.service#AccessDeniedException.
//   - SQS (awsJson1_0, query-compatible): 403, the same __type, header
//     x-amzn-query-error "AccessDenied;Sender" (ErrorCode() "AccessDenied"),
//     the action in lower case as SQS writes it ("sqs:sendmessage").
//   - Secrets Manager: 400, AccessDeniedException, the resource named as
//     the caller gave the SecretId.
//   - ECS: 400, AccessDeniedException.
//   - STS (awsQuery): 403, XML ErrorResponse with Code AccessDenied and
//     no reason: "User: <session ARN> is not authorized to perform:
//     sts:AssumeRole on resource: <role ARN>", the words the STS stand-in
//     also uses when the role's trust policy refuses.
//
// A request needing several authorizations (a batch, a transaction,
// RunTask's iam:PassRole) is denied by the first that fails. Every
// decision is recorded (Decisions, WithObserver); denials are logged with
// slog, without keys or bodies. WithUsage reports each authorized request
// once, after its answer, with what AWS bills for it (DynamoDB capacity,
// SQS empty receives: usage.go).
//
// # Operations modelled
//
// Anything else is refused (UnknownOperationException), never passed
// through unchecked.
//
//   - DynamoDB (resource arn:aws:dynamodb:<region>:<account>:table/<T>):
//     GetItem, PutItem, UpdateItem, DeleteItem, DescribeTable, CreateTable
//     (+ dynamodb:TagResource with Tags), DeleteTable, UpdateTable,
//     UpdateTimeToLive, DescribeTimeToLive; Query and Scan (on
//     .../table/<T>/index/<I> with IndexName); ListTables (on "*");
//     BatchGetItem and BatchWriteItem (their own action once per table);
//     TransactWriteItems (per item: dynamodb:ConditionCheckItem, PutItem,
//     DeleteItem, UpdateItem); TransactGetItems (dynamodb:GetItem per item).
//   - SQS (resource arn:aws:sqs:<region>:<account>:<queue>, the name being
//     the last path segment of QueueUrl, or QueueName; the gate's account
//     is used whatever the URL says): SendMessage, ReceiveMessage,
//     DeleteMessage, ChangeMessageVisibility, their Batch forms (authorized
//     as the single action, as AWS does), GetQueueAttributes,
//     SetQueueAttributes, PurgeQueue, DeleteQueue, TagQueue, UntagQueue,
//     ListQueueTags, ListDeadLetterSourceQueues, GetQueueUrl, CreateQueue
//     (+ sqs:TagQueue with tags); ListQueues on "*" (SQS gives it no
//     resource type, so only Resource "*" allows it).
//   - Secrets Manager: the SecretId operations (GetSecretValue,
//     DescribeSecret, PutSecretValue, UpdateSecret, DeleteSecret,
//     RestoreSecret, TagResource, UntagResource, ListSecretVersionIds,
//     Get/Put/DeleteResourcePolicy, RotateSecret, CancelRotateSecret,
//     UpdateSecretVersionStage) on the secret's ARN: WithSecretResolver's
//     answer; else a full ARN as given; else, for a name nobody resolves,
//     arn:...:secret:<name>-?????? (Secrets Manager's random suffix as a
//     wildcard, so only a policy allowing any suffix matches). Context
//     secretsmanager:SecretId, VersionId, VersionStage. CreateSecret on
//     <name>-?????? (+ TagResource with Tags); ListSecrets and
//     GetRandomPassword on "*".
//   - ECS: RunTask on the task definition ARN with ecs:cluster (a bare
//     cluster name becomes arn:aws:ecs:<region>:<account>:cluster/<name>),
//     plus iam:PassRole on the task and execution roles (from
//     WithTaskDefinitions, or the request's overrides) with
//     iam:PassedToService=ecs-tasks.amazonaws.com, plus, with tags,
//     ecs:TagResource on arn:...:task/<cluster>/* with
//     ecs:CreateAction=RunTask, aws:TagKeys and aws:RequestTag/<key>; a
//     task definition WithTaskDefinitions does not know answers
//     ClientException "TaskDefinition not found." once RunTask itself is
//     allowed. StopTask and DescribeTasks on each task's ARN
//     (arn:...:task/<cluster name>/<id> for a bare id) with ecs:cluster;
//     ListTasks on "*" with ecs:cluster; RegisterTaskDefinition on "*"
//     (+ iam:PassRole for its roles); DescribeTaskDefinition on "*".
//   - STS (awsQuery: a form-encoded POST with no query string, one Action,
//     Version 2011-06-15, no parameter twice; else refused): AssumeRole as
//     sts:AssumeRole on the RoleArn as given, with sts:RoleSessionName and
//     sts:ExternalId in the context (a missing RoleArn or RoleSessionName
//     answers ValidationError); GetCallerIdentity with no check at all, as
//     AWS needs no permission for it (recorded as allowed). The role's
//     trust policy is the stand-in's (local/stsstandin) to evaluate: the
//     gate tells it who the caller is in CallerHeader (role, session,
//     account, region, tls, form-encoded), having removed any
//     X-Galley-Iamgate-* header the client sent, so only a stand-in
//     served as the gate's upstream handler can trust it. Chain combines
//     the stack's principals with the sessions the stand-in issues.
//   - S3 (REST, path-style; s3.go): the signature as S3 computes it (the
//     path encoded once, the payload hash x-amz-content-sha256 names, which
//     must be signed; a hex digest is checked against the body, signed
//     chunks are refused), errors as S3's XML <Error> (AccessDenied 403,
//     SignatureDoesNotMatch, InvalidAccessKeyId, ExpiredToken).
//     PutObject, CreateMultipartUpload, UploadPart, CompleteMultipartUpload
//     as s3:PutObject (with s3:x-amz-server-side-encryption as requested),
//     AbortMultipartUpload, GetObject and HeadObject (s3:GetObject) and
//     DeleteObject on arn:aws:s3:::<bucket>/<key>; ListObjectsV2 as
//     s3:ListBucket on arn:aws:s3:::<bucket> with s3:prefix when named.
//     Anything else is refused NotImplemented. The bucket's own policy is
//     not evaluated: the S3 stand-in (local/s3standin) enforces what the
//     snapshots bucket's denies.
//
// Every request's context has aws:SecureTransport ("true" only when the
// request came over TLS), aws:PrincipalArn (the role ARN),
// aws:PrincipalAccount, aws:PrincipalType (AssumedRole) and
// aws:RequestedRegion; no aws:username (a role session has none). Other
// service condition keys (dynamodb:LeadingKeys and the like) are absent,
// so a policy conditioned on them denies rather than allows.
package iamgate
