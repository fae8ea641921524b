// The galley stack's custom resource Custom::S3PrefixList: the ID of AWS's
// managed prefix list named by the property PrefixListName
// ("com.amazonaws.<region>.s3"), which the workers' security group needs to
// let Fargate download ECR's image layers through the S3 gateway endpoint.
// CloudFormation cannot look it up and the stack is environment-agnostic.
// CDK's provider entrypoint wraps this handler and answers CloudFormation.
const { EC2Client, DescribeManagedPrefixListsCommand } = require('@aws-sdk/client-ec2');

exports.handler = async (event) => {
  if (event.RequestType === 'Delete') {
    // Nothing was made: the prefix list is AWS's.
    return { PhysicalResourceId: event.PhysicalResourceId };
  }
  const name = event.ResourceProperties.PrefixListName;
  const out = await new EC2Client({}).send(new DescribeManagedPrefixListsCommand({
    Filters: [{ Name: 'prefix-list-name', Values: [name] }],
  }));
  const list = (out.PrefixLists || []).find((p) => p.PrefixListName === name);
  if (!list) {
    throw new Error(`no managed prefix list named ${name} in this region`);
  }
  return { PhysicalResourceId: list.PrefixListId, Data: { PrefixListId: list.PrefixListId } };
};
