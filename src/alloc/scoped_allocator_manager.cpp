#include "tessel/alloc/scoped_allocator_manager.h"

#include <tuple>

#include "core/errors.h"

namespace tessel {
namespace {
constexpr const char* kComponent = "ScopedAllocatorManager";
}  // namespace

ScopedAllocatorManager::ScopedAllocatorManager(std::string device_name, Allocator* allocator)
    : device_(std::move(device_name)), allocator_(allocator) {}

std::shared_ptr<ScopedAllocator> ScopedAllocatorManager::add(int64_t step_id, int64_t scope_id,
                                                             const std::string& name,
                                                             const std::vector<Shape>& shapes,
                                                             DType dtype, int expected_call_count,
                                                             const std::vector<int64_t>& field_scope_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto existing = steps_.find(step_id);
  const auto taken = [&](int64_t id) {
    return existing != steps_.end() &&
           (existing->second.scopes.count(id) != 0 || existing->second.fields.count(id) != 0);
  };
  if (taken(scope_id)) {
    detail::throw_error(ErrorCode::kInternal, kComponent,
                        "device {} step {}: Cannot create ScopedAllocator because scope_id {} for "
                        "name {} already exists",
                        device_, step_id, scope_id, name);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t field_id = i < field_scope_ids.size() ? field_scope_ids[i]
                                                        : scope_id + 1 + static_cast<int64_t>(i);
    if (taken(field_id)) {
      detail::throw_error(ErrorCode::kInternal, kComponent,
                          "device {} step {}: Cannot create ScopedAllocator because field "
                          "scope_id {} for name {} already exists",
                          device_, step_id, field_id, name);
    }
  }
  // Built before the step is registered, so that a construction error leaves nothing behind.
  auto scope = std::make_shared<ScopedAllocator>(shapes, dtype, name, scope_id, expected_call_count,
                                                 allocator_, field_scope_ids);
  Step& step = steps_[step_id];
  step.scopes[scope_id] = scope;
  for (int i = 0; i < scope->num_fields(); ++i) {
    step.fields[scope->fields()[static_cast<size_t>(i)].scope_id] = {scope, i};
  }
  return scope;
}

std::shared_ptr<ScopedAllocator> ScopedAllocatorManager::get(int64_t step_id, int64_t scope_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto s = steps_.find(step_id);
  if (s == steps_.end() || s->second.scopes.count(scope_id) == 0) {
    detail::throw_error(ErrorCode::kNotFound, kComponent,
                        "device {} step {}: no live ScopedAllocator with scope_id {}", device_,
                        step_id, scope_id);
  }
  return s->second.scopes.at(scope_id);
}

Tensor ScopedAllocatorManager::allocate(int64_t step_id, int64_t field_scope_id, size_t bytes) {
  std::shared_ptr<ScopedAllocator> scope;
  int index = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = steps_.find(step_id);
    if (s == steps_.end() || s->second.fields.count(field_scope_id) == 0) {
      detail::throw_error(ErrorCode::kNotFound, kComponent,
                          "device {} step {}: no live field with scope_id {}", device_, step_id,
                          field_scope_id);
    }
    std::tie(scope, index) = s->second.fields.at(field_scope_id);
  }
  Tensor out = scope->allocate(index, bytes);
  if (scope->calls_remaining() == 0) forget(step_id, *scope);
  return out;
}

void ScopedAllocatorManager::forget(int64_t step_id, const ScopedAllocator& scope) {
  std::lock_guard<std::mutex> lock(mu_);
  auto s = steps_.find(step_id);
  if (s == steps_.end()) return;
  Step& step = s->second;
  const auto registered = step.scopes.find(scope.scope_id());
  if (registered == step.scopes.end() || registered->second.get() != &scope) return;  // gone
  step.scopes.erase(registered);
  for (const ScopedField& f : scope.fields()) step.fields.erase(f.scope_id);
  if (step.scopes.empty()) steps_.erase(s);
}

void ScopedAllocatorManager::release(int64_t step_id, int64_t scope_id) {
  std::shared_ptr<ScopedAllocator> scope;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = steps_.find(step_id);
    if (s == steps_.end() || s->second.scopes.count(scope_id) == 0) {
      detail::throw_error(ErrorCode::kNotFound, kComponent,
                          "device {} step {}: release of scope_id {}, which is not live (never "
                          "added, released, cleaned up or retired by its last expected "
                          "allocation)",
                          device_, step_id, scope_id);
    }
    scope = s->second.scopes.at(scope_id);
  }
  forget(step_id, *scope);
  scope->close();
}

void ScopedAllocatorManager::cleanup_step(int64_t step_id) {
  std::lock_guard<std::mutex> lock(mu_);
  steps_.erase(step_id);
}

int ScopedAllocatorManager::num_live_scopes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [id, step] : steps_) n += step.scopes.size();
  return static_cast<int>(n);
}

}  // namespace tessel
