// The generated hotline.v1 protobuf and gRPC code.
#pragma once

#include "hotline/v1/hotline.grpc.pb.h"
#include "hotline/v1/hotline.pb.h"
