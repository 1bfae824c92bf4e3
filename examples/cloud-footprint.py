#!/usr/bin/env python3
"""Plays a cluster's cloud controller against moto_server on 127.0.0.1:5000: creates load
balancers, target groups, security groups and an ENI tagged kubernetes.io/cluster/demo=owned,
plus a security group of another cluster that must survive. `--list` prints what is there."""
import sys

import boto3

ENDPOINT = "http://127.0.0.1:5000"
KW = dict(endpoint_url=ENDPOINT, region_name="us-east-1",
          aws_access_key_id="test", aws_secret_access_key="test")
ec2, elbv2, elb = (boto3.client(s, **KW) for s in ("ec2", "elbv2", "elb"))
OWNED = [{"Key": "kubernetes.io/cluster/demo", "Value": "owned"}]


def listing():
    groups = [g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"]
              if g["GroupName"] != "default"]
    lbs = [lb["LoadBalancerName"] for lb in elbv2.describe_load_balancers()["LoadBalancers"]]
    clbs = [lb["LoadBalancerName"] for lb in elb.describe_load_balancers()["LoadBalancerDescriptions"]]
    tgs = [tg["TargetGroupName"] for tg in elbv2.describe_target_groups()["TargetGroups"]]
    enis = [n["NetworkInterfaceId"] for n in ec2.describe_network_interfaces()["NetworkInterfaces"]]
    print(f"load balancers {lbs + clbs}\ntarget groups {tgs}\nsecurity groups {groups}\nENIs {enis}")


if "--list" in sys.argv:
    listing()
    sys.exit(0)

vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=az)["Subnet"]["SubnetId"]
           for i, az in enumerate(["us-east-1a", "us-east-1b"])]


def group(name, tags):
    spec = [{"ResourceType": "security-group", "Tags": tags}] if tags else []
    return ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc,
                                     TagSpecifications=spec)["GroupId"]


lb_group = group("demo-lb", OWNED)
node_group = group("demo-nodes", OWNED)
ec2.authorize_security_group_ingress(GroupId=node_group, IpPermissions=[{
    "IpProtocol": "tcp", "FromPort": 80, "ToPort": 80, "UserIdGroupPairs": [{"GroupId": lb_group}]}])
group("other-cluster", [{"Key": "kubernetes.io/cluster/other", "Value": "owned"}])
for i in range(3):
    lb = elbv2.create_load_balancer(Name=f"demo-web-{i}", Subnets=subnets, SecurityGroups=[lb_group],
                                    Tags=OWNED)["LoadBalancers"][0]["LoadBalancerArn"]
    tg = elbv2.create_target_group(Name=f"demo-web-{i}", Protocol="HTTP", Port=80, VpcId=vpc,
                                   Tags=OWNED)["TargetGroups"][0]["TargetGroupArn"]
    elbv2.create_listener(LoadBalancerArn=lb, Protocol="HTTP", Port=80,
                          DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}])
elb.create_load_balancer(LoadBalancerName="demo-legacy", Subnets=subnets, SecurityGroups=[lb_group],
                         Listeners=[{"Protocol": "HTTP", "LoadBalancerPort": 80, "InstancePort": 80}],
                         Tags=OWNED)
ec2.create_network_interface(SubnetId=subnets[0], Groups=[node_group],
                             TagSpecifications=[{"ResourceType": "network-interface", "Tags": OWNED}])
listing()
