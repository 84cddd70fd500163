/**
 * The offline identity: what Cursor's account calls get when the user has no Cursor account.
 * A local user with privacy mode on (no training), in no team, on a plan with no limit reached.
 */
import { create } from "@bufbuild/protobuf"
import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf"
import { Effect } from "effect"
import {
  GetCurrentPeriodUsageRequestSchema,
  GetCurrentPeriodUsageResponseSchema,
  GetEmailRequestSchema,
  GetEmailResponseSchema,
  GetMeRequestSchema,
  GetMeResponseSchema,
  GetPlanInfoRequestSchema,
  GetPlanInfoResponseSchema,
  GetTeamsRequestSchema,
  GetTeamsResponseSchema,
  GetUsageLimitStatusAndActiveGrantsRequestSchema,
  GetUsageLimitStatusAndActiveGrantsResponseSchema,
  GetUserPrivacyModeRequestSchema,
  GetUserPrivacyModeResponseSchema,
  GetUserProfileRequestSchema,
  GetUserProfileResponseSchema,
  IsOnNewPricingRequestSchema,
  IsOnNewPricingResponseSchema,
  PrivacyMode
} from "../../gen/aiserver/v1/account_pb.js"
import type { CatalogueOptions, Identity } from "./Catalogue.js"
import { defaultIdentity } from "./Catalogue.js"
import type { Path } from "./Procedure.js"
import { rest, unary } from "./Procedure.js"

const identityOf = (options: CatalogueOptions): Identity => options.identity ?? defaultIdentity

const answering = <In extends DescMessage, Out extends DescMessage>(
  path: Path,
  requestSchema: In,
  responseSchema: Out,
  answer: (identity: Identity) => MessageInitShape<Out>
) => unary(path, requestSchema, responseSchema, (options) => Effect.sync(() => create(responseSchema, answer(identityOf(options)))))

export const accountRpcs = [
  answering("/aiserver.v1.AuthService/GetEmail", GetEmailRequestSchema, GetEmailResponseSchema, ({ email }) => ({ email })),
  answering("/aiserver.v1.DashboardService/GetMe", GetMeRequestSchema, GetMeResponseSchema, ({ email, name }) => ({
    authId: "local",
    email,
    firstName: name
  })),
  answering("/aiserver.v1.DashboardService/GetTeams", GetTeamsRequestSchema, GetTeamsResponseSchema, () => ({})),
  answering("/aiserver.v1.DashboardService/GetPlanInfo", GetPlanInfoRequestSchema, GetPlanInfoResponseSchema, () => ({
    planInfo: { planName: "Local (your own API keys)" }
  })),
  answering("/aiserver.v1.DashboardService/GetUserPrivacyMode", GetUserPrivacyModeRequestSchema, GetUserPrivacyModeResponseSchema, () => ({
    privacyMode: PrivacyMode.NO_TRAINING
  })),
  answering(
    "/aiserver.v1.DashboardService/GetUsageLimitStatusAndActiveGrants",
    GetUsageLimitStatusAndActiveGrantsRequestSchema,
    GetUsageLimitStatusAndActiveGrantsResponseSchema,
    () => ({ usageLimitPolicyStatus: { isInSlowPool: false } })
  ),
  // Usage display off: the tokens go to the user's own providers, not through Cursor's meter.
  answering("/aiserver.v1.DashboardService/GetCurrentPeriodUsage", GetCurrentPeriodUsageRequestSchema, GetCurrentPeriodUsageResponseSchema, () => ({
    enabled: false
  })),
  answering("/aiserver.v1.DashboardService/IsOnNewPricing", IsOnNewPricingRequestSchema, IsOnNewPricingResponseSchema, () => ({
    isOnNewPricing: true
  })),
  answering("/aiserver.v1.DashboardService/GetUserProfile", GetUserProfileRequestSchema, GetUserProfileResponseSchema, ({ name }) => ({
    profile: { displayName: name }
  }))
]

/**
 * The REST profile. Keys other than `email` are those yaogjim/cursor-byok answers
 * (internal/backend/server/upstream/client.go); `email` is ours, for tools that read it.
 * A paid membership, so the IDE does not put its upgrade prompts before the local models.
 */
export const fullStripeProfile = (identity: Identity) => ({
  email: identity.email,
  membershipType: "pro",
  subscriptionStatus: "active",
  lastPaymentFailed: false,
  pendingCancellationDate: "",
  daysRemainingOnTrial: 0
})

export const stripeProfileRpcs = [
  rest("/auth/full_stripe_profile", (options) => fullStripeProfile(identityOf(options))),
  // Cursor's answer here is a bare JSON string (a Stripe id, per the same peer); there is none.
  rest("/auth/stripe_profile", () => "")
]
